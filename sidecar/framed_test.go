package sidecar_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// TestFramedSessions: the framed session port refuses strangers, runs
// batches with the same answers as the Session RPC, pins transactions,
// takes Cancel, and reports a session's end as an error.
func TestFramedSessions(t *testing.T) {
	t.Parallel()
	cfg := sidecar.DefaultPoolConfig
	cfg.IdleInTransactionTimeout = 300 * time.Millisecond
	srv := startSidecar(t, shared, cfg)
	ctx := context.Background()
	if srv.SessionAddr() == "" {
		t.Fatal("no framed session port")
	}
	for _, wrong := range []string{"", "wrong-secret-0123456789"} {
		_, err := sidecar.DialSession(ctx, srv.SessionAddr(), sidecar.DialOptions{Secret: wrong}, "postgres", "postgres", "")
		if pgerr.Code(err) != "28000" {
			t.Errorf("secret %q: %v, want 28000", wrong, err)
		}
	}
	open := func(token string) *sidecar.ClientSession {
		s, err := sidecar.DialSession(ctx, srv.SessionAddr(), sidecar.DialOptions{Secret: secret}, "postgres", "postgres", token)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { s.Close() })
		return s
	}
	a := open("framed-token")
	if got := query(t, a, pb.Mode_STATEMENT, "SELECT 6 * 7").one(t); got != "42" {
		t.Fatalf("framed query: %s", got)
	}
	pid := query(t, a, pb.Mode_STATEMENT, "BEGIN; SELECT pg_backend_pid()").one(t)
	if got := query(t, a, pb.Mode_STATEMENT, "SELECT pg_backend_pid()").one(t); got != pid {
		t.Errorf("transaction moved from backend %s to %s", pid, got)
	}
	query(t, a, pb.Mode_STATEMENT, "COMMIT")

	// Cancel reaches a framed session through the gRPC port.
	c := dial(t, srv)
	go func() {
		time.Sleep(300 * time.Millisecond)
		c.Cancel(ctx, &pb.CancelRequest{CancelToken: "framed-token"})
	}()
	if r := query(t, a, pb.Mode_STATEMENT, "SELECT pg_sleep(20)"); len(r.errors) != 1 || r.errors[0] != "57014" {
		t.Fatalf("cancel: %v", r)
	}

	// The idle-in-transaction timeout ends the session with 25P03.
	query(t, a, pb.Mode_STATEMENT, "BEGIN")
	time.Sleep(700 * time.Millisecond)
	var raw []byte
	a.Run(&pb.Batch{Frontend: encode(t, &pgproto3.Query{String: "SELECT 1"})}, func(b []byte) error { raw = append(raw, b...); return nil })
	if !strings.Contains(string(raw), "25P03") {
		t.Fatalf("after the timeout: %q", raw)
	}
	if _, err := a.Run(&pb.Batch{Frontend: encode(t, &pgproto3.Query{String: "SELECT 1"})}, func([]byte) error { return nil }); pgerr.Code(err) != "25P03" {
		t.Errorf("next batch on an ended session: %v, want 25P03", err)
	}
}
