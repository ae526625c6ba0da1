package router_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tesseradb/tessera/router"
)

// startDrainable starts another router on the package's cluster and
// returns it, for tests that drain it; Stop runs when the test ends.
func startDrainable(t *testing.T) *router.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := router.New(router.Config{ListenAddr: "127.0.0.1:0", Store: cluster.Store(), Secret: cluster.Secret()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(context.Background()) })
	return r
}

// postgresAt is the DSN of database postgres on the router at addr.
func postgresAt(addr string) string {
	return fmt.Sprintf("postgres://postgres:postgres@%s/postgres?sslmode=disable", addr)
}

func sqlState(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// TestDrain: a draining router refuses new connections with 57P03, lets
// a running statement and an open transaction finish, closes an idle
// session and each finished one with 57P01, and returns once all are
// gone, well before its grace period.
func TestDrain(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setupConn := connect(t, "postgres")
	if _, err := setupConn.Exec(ctx, "DROP TABLE IF EXISTS drain_t; CREATE TABLE drain_t (id int PRIMARY KEY)"); err != nil {
		t.Fatal(err)
	}
	r := startDrainable(t)
	inTx, idle, running := connectTo(t, postgresAt(r.Addr())), connectTo(t, postgresAt(r.Addr())), connectTo(t, postgresAt(r.Addr()))
	if _, err := inTx.Exec(ctx, "BEGIN; INSERT INTO drain_t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	sleepDone := make(chan error, 1)
	go func() {
		_, err := running.Exec(ctx, "SELECT pg_sleep(1.5)")
		sleepDone <- err
	}()
	time.Sleep(300 * time.Millisecond) // the sleep is running

	drained := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		r.Drain(ctx, 30*time.Second)
		drained <- time.Since(start)
	}()

	// New connections are refused as by a Postgres shutting down.
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err := pgx.Connect(ctx, postgresAt(r.Addr()))
		if sqlState(err) == "57P03" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a new connection while draining: %v, want 57P03", err)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// The running statement finishes; its session then goes.
	if err := <-sleepDone; err != nil {
		t.Fatalf("the statement in flight when the drain began failed: %v", err)
	}
	if _, err := running.Exec(ctx, "SELECT 1"); sqlState(err) != "57P01" {
		t.Fatalf("a statement after the drain closed its session: %v, want 57P01", err)
	}
	// The idle session was closed with 57P01.
	if _, err := idle.Exec(ctx, "SELECT 1"); sqlState(err) != "57P01" {
		t.Fatalf("the idle session: %v, want 57P01", err)
	}
	// The transaction runs on and commits.
	if _, err := inTx.Exec(ctx, "INSERT INTO drain_t VALUES (2)"); err != nil {
		t.Fatalf("a statement of a transaction open when the drain began: %v", err)
	}
	if _, err := inTx.Exec(ctx, "COMMIT"); err != nil {
		t.Fatalf("COMMIT of a transaction open when the drain began: %v", err)
	}
	var n int
	if err := setupConn.QueryRow(ctx, "SELECT count(*) FROM drain_t").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows committed through the draining router: %d (%v), want 2", n, err)
	}
	select {
	case took := <-drained:
		t.Logf("drained in %v", took)
	case <-time.After(10 * time.Second):
		t.Fatal("the router did not finish draining once its sessions were gone")
	}
}

// TestDrainGraceOver: when the grace period ends, an open transaction's
// session is ended with 57P01 (its transaction rolls back) and a running
// statement is canceled.
func TestDrainGraceOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	setupConn := connect(t, "postgres")
	if _, err := setupConn.Exec(ctx, "DROP TABLE IF EXISTS drain_grace; CREATE TABLE drain_grace (id int)"); err != nil {
		t.Fatal(err)
	}
	r := startDrainable(t)
	inTx, running := connectTo(t, postgresAt(r.Addr())), connectTo(t, postgresAt(r.Addr()))
	if _, err := inTx.Exec(ctx, "BEGIN; INSERT INTO drain_grace VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	sleepDone := make(chan error, 1)
	go func() {
		_, err := running.Exec(ctx, "SELECT pg_sleep(60)")
		sleepDone <- err
	}()
	time.Sleep(300 * time.Millisecond)
	start := time.Now()
	r.Drain(ctx, time.Second)
	t.Logf("Drain returned after %v (grace 1s)", time.Since(start))
	select {
	case err := <-sleepDone:
		if err == nil {
			t.Fatal("a statement running past the grace period succeeded")
		}
		t.Logf("the statement running past the grace period: %v", err)
	case <-time.After(15 * time.Second):
		t.Fatal("a statement running past the grace period was not ended")
	}
	if _, err := inTx.Exec(ctx, "COMMIT"); sqlState(err) != "57P01" {
		t.Fatalf("a transaction open past the grace period: %v, want 57P01", err)
	}
	var n int
	if err := setupConn.QueryRow(ctx, "SELECT count(*) FROM drain_grace").Scan(&n); err != nil || n != 0 {
		t.Fatalf("rows of the ended transaction: %d (%v), want 0 (rolled back)", n, err)
	}
}

// TestRollingRestart restarts both of two routers in turn under load from
// clients that reconnect (to whichever router answers) and check their
// connection before each transaction, as pgxpool does: no transaction
// fails, and every one that committed is there exactly once. Not
// parallel: its clients keep both cores busy, which would stretch the
// timing of the package's other tests.
func TestRollingRestart(t *testing.T) {
	ctx := context.Background()
	setupConn := connect(t, "postgres")
	if _, err := setupConn.Exec(ctx, "DROP TABLE IF EXISTS rolling_log; CREATE TABLE rolling_log (client int, seq int, PRIMARY KEY (client, seq))"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	routers := []*router.Server{startDrainable(t), startDrainable(t)}
	addrs := func() []string {
		mu.Lock()
		defer mu.Unlock()
		return []string{routers[0].Addr(), routers[1].Addr()}
	}

	const clients = 4
	stop := make(chan struct{})
	var committed, failed, reconnects atomic.Int64
	var firstFailure atomic.Value
	var wg sync.WaitGroup
	for id := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var conn *pgx.Conn
			defer func() {
				if conn != nil {
					conn.Close(ctx)
				}
			}()
			for seq := 0; ; {
				select {
				case <-stop:
					return
				default:
				}
				// Before each transaction, as pgxpool does before handing
				// out a connection: a router that drains says so between
				// statements, and a refused connection (57P03, or nothing
				// listening) costs no statement: try the other router.
				for i := id; conn == nil || conn.PgConn().CheckConn() != nil || conn.IsClosed(); i++ {
					if conn != nil {
						conn.Close(ctx)
						conn = nil
					}
					c, err := pgx.Connect(ctx, postgresAt(addrs()[i%2]))
					if err != nil {
						time.Sleep(5 * time.Millisecond)
						continue
					}
					conn = c
					reconnects.Add(1)
				}
				tx := func() error {
					if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
						return err
					}
					if _, err := conn.Exec(ctx, "INSERT INTO rolling_log VALUES ($1, $2)", id, seq); err != nil {
						return err
					}
					_, err := conn.Exec(ctx, "COMMIT")
					return err
				}
				if err := tx(); err != nil {
					failed.Add(1)
					firstFailure.CompareAndSwap(nil, err.Error())
					conn.Close(ctx)
					conn = nil
					continue
				}
				committed.Add(1)
				seq++
			}
		}()
	}

	restart := func(i int) {
		time.Sleep(500 * time.Millisecond)
		before := committed.Load()
		routers[i].Drain(ctx, 10*time.Second)
		routers[i].Stop(ctx)
		next := startDrainable(t)
		mu.Lock()
		routers[i] = next
		mu.Unlock()
		t.Logf("router %d restarted; %d transactions committed meanwhile", i, committed.Load()-before)
	}
	restart(0)
	restart(1)
	time.Sleep(500 * time.Millisecond)
	close(stop)
	wg.Wait()

	if f := failed.Load(); f != 0 {
		t.Fatalf("%d transactions failed during the rolling restart (first: %v)", f, firstFailure.Load())
	}
	var rows int64
	if err := setupConn.QueryRow(ctx, "SELECT count(*) FROM rolling_log").Scan(&rows); err != nil {
		t.Fatal(err)
	}
	if rows != committed.Load() || rows == 0 {
		t.Fatalf("rows %d, committed transactions %d", rows, committed.Load())
	}
	t.Logf("%d transactions committed by %d clients across two rolling restarts, %d connections", rows, clients, reconnects.Load())
}

// lockedBuffer is a log destination several goroutines write.
type lockedBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestLogsHoldNoSecrets: at debug level, a router's logs of sessions,
// a failing statement and a drain hold neither the cluster secret nor a
// row value.
func TestLogsHoldNoSecrets(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var logs lockedBuffer
	r, err := router.New(router.Config{ListenAddr: "127.0.0.1:0", Store: cluster.Store(), Secret: cluster.Secret(),
		Logger: slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(context.Background()) })
	conn := connectTo(t, postgresAt(r.Addr()))
	const value = "row-value-8842"
	if _, err := conn.Exec(ctx, "SELECT '"+value+"'::text"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT '"+value+"'::int"); err == nil {
		t.Fatal("a bad cast succeeded")
	}
	r.Drain(ctx, time.Second)
	out := logs.String()
	if !strings.Contains(out, "router draining") {
		t.Fatalf("the router logged nothing of its drain:\n%s", out)
	}
	for _, secret := range []string{cluster.Secret(), value} {
		if strings.Contains(out, secret) {
			t.Errorf("the logs hold %q:\n%s", secret, out)
		}
	}
}
