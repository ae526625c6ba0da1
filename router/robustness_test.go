package router_test

import (
	"bufio"
	"context"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// rawSession logs in with pgx's protocol layer and hands back the raw
// connection, for sending what no driver would.
func rawSession(t *testing.T) (net.Conn, *pgproto3.Frontend) {
	t.Helper()
	return hijack(t, dsn("postgres"))
}

// hijack logs in to dsn and hands back the connection and its protocol
// layer.
func hijack(t *testing.T, dsn string) (net.Conn, *pgproto3.Frontend) {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	h, err := conn.PgConn().Hijack()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Conn.Close() })
	return h.Conn, h.Frontend
}

// readUntil reads backend messages until one of type want (or an error).
func readUntil(t *testing.T, fe *pgproto3.Frontend, want byte) (errCode string) {
	t.Helper()
	for {
		msg, err := fe.Receive()
		if err != nil {
			return "closed"
		}
		switch m := msg.(type) {
		case *pgproto3.ErrorResponse:
			errCode = m.Code
			if m.Severity == "FATAL" {
				return errCode
			}
		case *pgproto3.ReadyForQuery:
			if want == 'Z' {
				return errCode
			}
		}
	}
}

// TestBadClientsHarmNoOne: a malformed message, an oversized one and a
// client vanishing mid-transaction each cost only that client; the router
// keeps serving others and their backends go back to the pool clean.
func TestBadClientsHarmNoOne(t *testing.T) {
	ctx := context.Background()
	other := connect(t, "postgres")
	other.Exec(ctx, "CREATE TABLE IF NOT EXISTS harm (id int)")

	// An unknown message type ends that connection with 08P01.
	c, fe := rawSession(t)
	c.Write([]byte{'!', 0, 0, 0, 4})
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if code := readUntil(t, fe, 'Z'); code != "08P01" {
		t.Errorf("unknown message: %q", code)
	}
	// A length below 4.
	c, fe = rawSession(t)
	c.Write([]byte{'Q', 0, 0, 0, 2})
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if code := readUntil(t, fe, 'Z'); code != "08P01" {
		t.Errorf("bad length: %q", code)
	}
	// A message over the size limit is refused before it is read.
	c, fe = rawSession(t)
	var hdr [5]byte
	hdr[0] = 'Q'
	binary.BigEndian.PutUint32(hdr[1:], 1<<30)
	c.Write(hdr[:])
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if code := readUntil(t, fe, 'Z'); code != "54000" {
		t.Errorf("oversized message: %q", code)
	}
	// A Query without its terminating zero.
	c, fe = rawSession(t)
	c.Write([]byte{'Q', 0, 0, 0, 6, 'x', 'y'})
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if code := readUntil(t, fe, 'Z'); code != "08P01" {
		t.Errorf("unterminated query: %q", code)
	}

	// A client vanishes in the middle of a transaction.
	c, fe = rawSession(t)
	q, _ := (&pgproto3.Query{String: "BEGIN; INSERT INTO harm VALUES (1); SELECT pg_backend_pid()"}).Encode(nil)
	c.Write(q)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	if code := readUntil(t, fe, 'Z'); code != "" {
		t.Fatalf("transaction: %q", code)
	}
	c.Close()
	// Others are unharmed, and the vanished insert is rolled back.
	deadline := time.Now().Add(10 * time.Second)
	for {
		var n int
		if err := other.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE state LIKE 'idle in transaction%'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the vanished client's transaction stayed open")
		}
		time.Sleep(50 * time.Millisecond)
	}
	var n int
	if err := other.QueryRow(ctx, "SELECT count(*) FROM harm").Scan(&n); err != nil || n != 0 {
		t.Errorf("vanished insert: %d rows, %v", n, err)
	}
}

// TestStartupRefusals: protocol 2 and a startup packet without a user.
func TestStartupRefusals(t *testing.T) {
	for _, tc := range []struct {
		name   string
		packet []byte
	}{
		{"protocol 2", startupPacket(2<<16, "user", "postgres")},
		{"no user", startupPacket(3<<16, "database", "postgres")},
		{"garbage length", []byte{0, 0, 0, 2, 0, 3, 0, 0}},
	} {
		c, err := net.Dial("tcp", cluster.Info().Router)
		if err != nil {
			t.Fatal(err)
		}
		c.Write(tc.packet)
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, _ := io.ReadAll(bufio.NewReader(c))
		c.Close()
		if len(b) == 0 || b[0] != 'E' {
			t.Errorf("%s: answer %q, want an ErrorResponse", tc.name, b)
		}
	}
	// GSSENC is declined with 'N'.
	c, err := net.Dial("tcp", cluster.Info().Router)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.Write([]byte{0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30})
	var b [1]byte
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := io.ReadFull(c, b[:]); err != nil || b[0] != 'N' {
		t.Errorf("GSSENCRequest: %q %v", b, err)
	}
}

func startupPacket(code uint32, kv ...string) []byte {
	var body []byte
	body = binary.BigEndian.AppendUint32(body, code)
	for _, s := range kv {
		body = append(body, s...)
		body = append(body, 0)
	}
	body = append(body, 0)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body)+4)), body...)
}

// TestCopyThroughExtendedProtocol: COPY FROM STDIN started by Execute ends
// at the Sync after CopyDone, as in Postgres.
func TestCopyThroughExtendedProtocol(t *testing.T) {
	ctx := context.Background()
	connect(t, "postgres").Exec(ctx, "CREATE TABLE IF NOT EXISTS copy_ext (id int)")
	c, fe := rawSession(t)
	c.SetDeadline(time.Now().Add(20 * time.Second))
	var b []byte
	for _, m := range []pgproto3.FrontendMessage{
		&pgproto3.Parse{Query: "COPY copy_ext FROM STDIN"}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{},
	} {
		b, _ = m.Encode(b)
	}
	c.Write(b)
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := msg.(*pgproto3.CopyInResponse); ok {
			break
		}
		if e, ok := msg.(*pgproto3.ErrorResponse); ok {
			t.Fatalf("COPY: %s", e.Message)
		}
	}
	b = b[:0]
	for _, m := range []pgproto3.FrontendMessage{
		&pgproto3.CopyData{Data: []byte("1\n2\n")}, &pgproto3.CopyDone{}, &pgproto3.Sync{},
	} {
		b, _ = m.Encode(b)
	}
	c.Write(b)
	var tag string
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		switch m := msg.(type) {
		case *pgproto3.CommandComplete:
			tag = string(m.CommandTag)
		case *pgproto3.ErrorResponse:
			t.Fatalf("COPY: %s", m.Message)
		}
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			break
		}
	}
	if tag != "COPY 2" {
		t.Fatalf("tag %q", tag)
	}
}
