package sidecar_test

import (
	"context"
	"net"
	"os"
	"path/filepath"
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
	checkSessionLife(t, srv, open("framed-token"), "framed-token")
}

// checkSessionLife runs a session, opened with the cancel token token on
// srv with a 300 ms idle-in-transaction timeout, through its life: a
// query, a transaction pinned to one backend, Cancel through the gRPC
// port, and the timeout ending the session with 25P03.
func checkSessionLife(t *testing.T, srv *sidecar.Server, a *sidecar.ClientSession, token string) {
	t.Helper()
	ctx := context.Background()
	if got := query(t, a, pb.Mode_STATEMENT, "SELECT 6 * 7").one(t); got != "42" {
		t.Fatalf("query: %s", got)
	}
	pid := query(t, a, pb.Mode_STATEMENT, "BEGIN; SELECT pg_backend_pid()").one(t)
	if got := query(t, a, pb.Mode_STATEMENT, "SELECT pg_backend_pid()").one(t); got != pid {
		t.Errorf("transaction moved from backend %s to %s", pid, got)
	}
	if r := query(t, a, pb.Mode_STATEMENT, "COMMIT"); r.result.TxStatus != pb.TxStatus_IDLE {
		t.Errorf("after COMMIT: %v", r.result.TxStatus)
	}

	c := dial(t, srv)
	go func() {
		time.Sleep(300 * time.Millisecond)
		c.Cancel(ctx, &pb.CancelRequest{CancelToken: token})
	}()
	if r := query(t, a, pb.Mode_STATEMENT, "SELECT pg_sleep(20)"); len(r.errors) != 1 || r.errors[0] != "57014" {
		t.Fatalf("cancel: %v", r)
	}

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

// TestFramedSessionsOverTheUnixSocket: the framed port also listens on a
// unix socket only this OS user may open; a session there runs batches,
// and a hello naming another instance is refused with 08004, as on TCP.
func TestFramedSessionsOverTheUnixSocket(t *testing.T) {
	t.Parallel()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	ctx := context.Background()
	path := srv.SessionSocket()
	fi, err := os.Stat(path)
	if err != nil || fi.Mode()&os.ModeSocket == 0 || fi.Mode().Perm() != 0o600 {
		t.Fatalf("session socket %q: %v, mode %v; want a socket with mode 0600", path, err, fi.Mode())
	}
	addr := sidecar.SessionSocketAddr(path)
	right := sidecar.DialOptions{Secret: secret, ShardUID: "shard-0", InstanceID: shared.Config().InstanceID}
	s, err := sidecar.DialSession(ctx, addr, right, "postgres", "postgres", "")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := query(t, s, pb.Mode_STATEMENT, "SELECT 6 * 7").one(t); got != "42" {
		t.Fatalf("query over the socket: %s", got)
	}
	for _, wrong := range []sidecar.DialOptions{
		{Secret: secret, ShardUID: "shard-9", InstanceID: right.InstanceID},
		{Secret: secret, ShardUID: "shard-0", InstanceID: "someone-else"},
	} {
		if _, err := sidecar.DialSession(ctx, addr, wrong, "postgres", "postgres", ""); pgerr.Code(err) != "08004" {
			t.Errorf("hello for %s/%s: %v, want 08004", wrong.ShardUID, wrong.InstanceID, err)
		}
		if _, err := sidecar.DialSession(ctx, srv.SessionAddr(), wrong, "postgres", "postgres", ""); pgerr.Code(err) != "08004" {
			t.Errorf("hello for %s/%s over TCP: %v, want 08004", wrong.ShardUID, wrong.InstanceID, err)
		}
	}
	if _, err := sidecar.DialSession(ctx, addr, sidecar.DialOptions{Secret: "wrong-secret-0123456789"}, "postgres", "postgres", ""); pgerr.Code(err) != "28000" {
		t.Errorf("wrong secret over the socket: %v, want 28000", err)
	}
	srv.Stop(ctx)
	if _, err := os.Stat(path); !os.IsNotExist(err) {
		t.Errorf("the socket outlived the sidecar: %v", err)
	}
}

// TestDialLocalSessionFallsBackToTCP: a router prefers the sidecar's
// unix socket, and goes by TCP when the path is absent here or belongs to
// another instance's sidecar.
func TestDialLocalSessionFallsBackToTCP(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	other, err := sidecar.New(sidecar.Config{ShardUID: "shard-0", InstanceID: "another-instance", ListenAddr: "127.0.0.1:0",
		SessionListenAddr: "127.0.0.1:0", SessionSocket: filepath.Join(t.TempDir(), "other.sock"), Secret: secret, Manager: shared})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer other.Stop(ctx)
	opts := sidecar.DialOptions{Secret: secret, ShardUID: "shard-0", InstanceID: shared.Config().InstanceID}
	for _, c := range []struct {
		path       string
		wantFailed bool
	}{
		{srv.SessionSocket(), false},
		{other.SessionSocket(), true},
		{filepath.Join(t.TempDir(), "absent.sock"), true},
		{"", false},
	} {
		s, failed, err := sidecar.DialLocalSession(ctx, c.path, srv.SessionAddr(), opts, "postgres", "postgres", "")
		if err != nil {
			t.Fatalf("path %q: %v", c.path, err)
		}
		if failed != c.wantFailed {
			t.Errorf("path %q: socket failed %v, want %v", c.path, failed, c.wantFailed)
		}
		if got := query(t, s, pb.Mode_STATEMENT, "SELECT 'answered'").one(t); got != "answered" {
			t.Errorf("path %q: %s", c.path, got)
		}
		s.Close()
	}
}

// TestSessionSocketIsNotStolen: a sidecar replaces a stale socket file
// but refuses a path another live sidecar listens on.
func TestSessionSocketIsNotStolen(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	cfg := sidecar.Config{ShardUID: "shard-0", InstanceID: "second", ListenAddr: "127.0.0.1:0", SessionListenAddr: "127.0.0.1:0",
		SessionSocket: srv.SessionSocket(), Secret: secret, Manager: shared}
	second, err := sidecar.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := second.Start(ctx); err == nil {
		second.Stop(ctx)
		t.Fatal("a second sidecar took a live sidecar's socket")
	}
	// A stale socket file, left by a process that died, is replaced.
	stale := filepath.Join(t.TempDir(), "stale.sock")
	l, err := net.Listen("unix", stale)
	if err != nil {
		t.Fatal(err)
	}
	l.(*net.UnixListener).SetUnlinkOnClose(false)
	l.Close()
	cfg.SessionSocket = stale
	third, err := sidecar.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := third.Start(ctx); err != nil {
		t.Fatalf("a stale socket file: %v", err)
	}
	third.Stop(ctx)
}
