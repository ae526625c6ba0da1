package router_test

import (
	"context"
	"encoding/binary"
	"net"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/router"
)

// startRouterWith starts another router on the package's cluster with
// cfg (its listen address, store and secret filled in) and returns its
// address.
func startRouterWith(t *testing.T, cfg router.Config) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cfg.ListenAddr, cfg.Store, cfg.Secret = "127.0.0.1:0", cluster.Store(), cluster.Secret()
	r, err := router.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(context.Background()) })
	return r.Addr()
}

// dialRaw opens a TCP connection to addr, closed when the test ends.
func dialRaw(t *testing.T, addr string) net.Conn {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// startSCRAM sends a startup packet for user and reads up to the
// server's AuthenticationSASL.
func startSCRAM(t *testing.T, c net.Conn, user string) *pgproto3.Frontend {
	t.Helper()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	c.Write(startupPacket(3<<16, "user", user, "database", "postgres"))
	fe := pgproto3.NewFrontend(c, c)
	msg, err := fe.Receive()
	if err != nil {
		t.Fatalf("startup: %v", err)
	}
	if _, ok := msg.(*pgproto3.AuthenticationSASL); !ok {
		t.Fatalf("startup: got %T, want AuthenticationSASL", msg)
	}
	return fe
}

// fatalAnswer reads until an ErrorResponse or the end of the connection
// and returns the error ("" and the read error when none came).
func fatalAnswer(fe *pgproto3.Frontend) (*pgproto3.ErrorResponse, error) {
	for {
		msg, err := fe.Receive()
		if err != nil {
			return nil, err
		}
		if e, ok := msg.(*pgproto3.ErrorResponse); ok {
			return e, nil
		}
	}
}

// TestPreAuthMessageLimit: before authentication a client cannot make
// the router read more than Postgres would (65535 bytes for an
// authentication message, 10000 for a startup packet): the router
// answers at once, without waiting for the body, with Postgres's words.
func TestPreAuthMessageLimit(t *testing.T) {
	addr := cluster.Info().Router
	c := dialRaw(t, addr)
	fe := startSCRAM(t, c, "postgres")
	var hdr [5]byte
	hdr[0] = 'p'
	binary.BigEndian.PutUint32(hdr[1:], 1<<20)
	c.Write(hdr[:])
	c.SetDeadline(time.Now().Add(5 * time.Second))
	e, err := fatalAnswer(fe)
	if err != nil || e.Code != "08P01" || e.Message != "invalid message length" {
		t.Errorf("oversized password message: %+v %v", e, err)
	}

	c = dialRaw(t, addr)
	c.SetDeadline(time.Now().Add(5 * time.Second))
	c.Write([]byte{0, 1, 0, 0, 0, 3, 0, 0}) // 65536 bytes announced
	e, err = fatalAnswer(pgproto3.NewFrontend(c, c))
	if err != nil || e.Code != "08P01" || e.Message != "invalid length of startup packet" {
		t.Errorf("oversized startup packet: %+v %v", e, err)
	}
}
