package sidecar_test

import (
	"bytes"
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// openInProcess opens a session on the sidecar named instanceID by
// function call, checking that neither socket nor TCP served it.
func openInProcess(t *testing.T, srv *sidecar.Server, instanceID, token string) *sidecar.ClientSession {
	t.Helper()
	opts := sidecar.DialOptions{Secret: secret, ShardUID: "shard-0", InstanceID: instanceID, InProcess: true}
	// Addresses nothing listens on: only the function call can serve.
	s, _, err := sidecar.DialLocalSession(context.Background(), filepath.Join(t.TempDir(), "none.sock"), "127.0.0.1:1", opts, "postgres", "postgres", token)
	if err != nil {
		t.Fatalf("in-process session: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestInProcessSessions: a router in the sidecar's process runs batches
// by function call with the answers of the framed port: transactions
// pin, Cancel interrupts, the idle-in-transaction timeout ends the
// session, a wrong credential is refused, and without InProcess the
// same dial goes by the socket.
func TestInProcessSessions(t *testing.T) {
	t.Parallel()
	cfg := sidecar.DefaultPoolConfig
	cfg.IdleInTransactionTimeout = 300 * time.Millisecond
	srv := startSidecarAs(t, shared, "in-process-a", cfg)
	ctx := context.Background()

	opts := sidecar.DialOptions{Secret: "wrong-secret-0123456789", ShardUID: "shard-0", InstanceID: "in-process-a", InProcess: true}
	if _, _, err := sidecar.DialLocalSession(ctx, "", "127.0.0.1:1", opts, "postgres", "postgres", ""); pgerr.Code(err) != "28000" {
		t.Errorf("wrong secret: %v, want 28000", err)
	}
	// Without InProcess, the dial takes the socket.
	opts.Secret, opts.InProcess = secret, false
	s, socketFailed, err := sidecar.DialLocalSession(ctx, srv.SessionSocket(), "127.0.0.1:1", opts, "postgres", "postgres", "")
	if err != nil || socketFailed {
		t.Fatalf("socket session: socket failed %v, %v", socketFailed, err)
	}
	s.Close()

	checkSessionLife(t, srv, openInProcess(t, srv, "in-process-a", "in-process-token"), "in-process-token")
}

// TestInProcessAnswersStreamAndListen: a large answer comes in chunks
// with only the last marked, a failing receiver ends the session without
// leaking its transaction, and Postgres's asynchronous messages reach
// Listen while the session is idle.
func TestInProcessAnswersStreamAndListen(t *testing.T) {
	t.Parallel()
	srv := startSidecarAs(t, shared, "in-process-b", sidecar.PoolConfig{})
	s := openInProcess(t, srv, "in-process-b", "")

	var raw bytes.Buffer
	chunks, lasts := 0, 0
	res, err := s.RunLast(&pb.Batch{Frontend: encode(t, &pgproto3.Query{String: "SELECT repeat('x', 100) FROM generate_series(1, 20000)"})},
		func(chunk []byte, last bool) error {
			chunks++
			if last {
				lasts++
			}
			raw.Write(chunk)
			return nil
		})
	if err != nil || res.TxStatus != pb.TxStatus_IDLE {
		t.Fatalf("large answer: %v %v", res, err)
	}
	if chunks < 20 || lasts != 1 || !bytes.HasSuffix(raw.Bytes(), []byte{'Z', 0, 0, 0, 5, 'I'}) || bytes.Count(raw.Bytes(), []byte(strings.Repeat("x", 100))) != 20000 {
		t.Fatalf("%d chunks, %d marked last, %d bytes", chunks, lasts, raw.Len())
	}

	// A receiver that fails mid-answer (its client went away) ends the
	// session; the open transaction does not survive on a pooled backend.
	broken := openInProcess(t, srv, "in-process-b", "")
	pid := query(t, broken, pb.Mode_STATEMENT, "BEGIN; SELECT pg_backend_pid()").one(t)
	gone := errors.New("client gone")
	_, err = broken.RunLast(&pb.Batch{Frontend: encode(t, &pgproto3.Query{String: "SELECT repeat('y', 100) FROM generate_series(1, 20000)"})},
		func([]byte, bool) error { return gone })
	if !errors.Is(err, gone) {
		t.Fatalf("failing receiver: %v", err)
	}
	if _, err := broken.Run(&pb.Batch{Frontend: encode(t, &pgproto3.Query{String: "SELECT 1"})}, func([]byte) error { return nil }); err == nil {
		t.Error("the session went on after its receiver failed")
	}
	eventually(t, "the abandoned transaction's backend to go", func() bool {
		return query(t, s, pb.Mode_STATEMENT, "SELECT count(*) FROM pg_stat_activity WHERE pid = "+pid).one(t) == "0"
	})

	listener := openInProcess(t, srv, "in-process-b", "")
	query(t, listener, pb.Mode_SESSION, "LISTEN in_process_news")
	got := make(chan []byte, 4)
	listener.Listen(func(msgs []byte) { got <- msgs })
	query(t, s, pb.Mode_STATEMENT, "NOTIFY in_process_news, 'ping'")
	select {
	case msgs := <-got:
		if !bytes.Contains(msgs, []byte("in_process_news\x00ping\x00")) {
			t.Fatalf("async message %q", msgs)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notification while the session was idle")
	}
	if got := query(t, listener, pb.Mode_SESSION, "SELECT 'after'").one(t); got != "after" {
		t.Fatalf("batch after a notification: %q", got)
	}

	// Without Listen, the notification goes out with the next answer.
	plain := openInProcess(t, srv, "in-process-b", "")
	query(t, plain, pb.Mode_SESSION, "LISTEN plain_in_process")
	raw.Reset()
	query(t, s, pb.Mode_STATEMENT, "NOTIFY plain_in_process, 'again'")
	time.Sleep(200 * time.Millisecond)
	if _, err := plain.Run(&pb.Batch{Mode: pb.Mode_SESSION, Frontend: encode(t, &pgproto3.Query{String: "SELECT 2"})}, func(b []byte) error {
		raw.Write(b)
		return nil
	}); err != nil || !bytes.Contains(raw.Bytes(), []byte("plain_in_process\x00again\x00")) {
		t.Fatalf("the answer after a notification does not carry it: %q %v", raw.Bytes(), err)
	}
}

// TestStopEndsInProcessSessions: stopping the sidecar ends its
// in-process sessions, rolling back what they left open, and later dials
// no longer find it in the process.
func TestStopEndsInProcessSessions(t *testing.T) {
	t.Parallel()
	srv := startSidecarAs(t, shared, "in-process-c", sidecar.PoolConfig{})
	s := openInProcess(t, srv, "in-process-c", "")
	query(t, s, pb.Mode_STATEMENT, "BEGIN; SELECT 1")
	srv.Stop(context.Background())
	if _, err := s.Run(&pb.Batch{Frontend: encode(t, &pgproto3.Query{String: "SELECT 1"})}, func([]byte) error { return nil }); pgerr.Code(err) != "08006" {
		t.Errorf("batch after Stop: %v, want 08006", err)
	}
	opts := sidecar.DialOptions{Secret: secret, ShardUID: "shard-0", InstanceID: "in-process-c", InProcess: true}
	if _, _, err := sidecar.DialLocalSession(context.Background(), "", "127.0.0.1:1", opts, "postgres", "postgres", ""); pgerr.Code(err) != "08006" {
		t.Errorf("dial after Stop: %v, want 08006 from the TCP fallback", err)
	}
}
