package router_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

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

// TestDrain: a draining router refuses new connections at TCP (and
// another router may take its address at once), answers 57P03 to one it
// had accepted, lets a client logging in run its first statement, a
// running statement and an open transaction finish, closes an idle
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
	// A connection the router has accepted, its startup not yet sent:
	// the answer to its SSLRequest shows it is being served.
	accepted, err := net.Dial("tcp", r.Addr())
	if err != nil {
		t.Fatal(err)
	}
	defer accepted.Close()
	frontend := pgproto3.NewFrontend(accepted, accepted)
	frontend.Send(&pgproto3.SSLRequest{})
	if err := frontend.Flush(); err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := io.ReadFull(accepted, b); err != nil || b[0] != 'N' {
		t.Fatalf("SSLRequest answered %q (%v), want N", b, err)
	}
	// A client logging in: the router has let it past the drain check
	// (its startup was answered), and it finishes logging in once the
	// drain has begun.
	loginGate, loginReached := make(chan struct{}), make(chan struct{})
	loginConfig, err := pgx.ParseConfig(postgresAt(r.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	loginConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := (&net.Dialer{}).DialContext(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &gatedConn{Conn: c, reached: loginReached, gate: loginGate}, nil
	}
	loggedIn := make(chan *pgx.Conn, 1)
	go func() {
		c, err := pgx.ConnectConfig(ctx, loginConfig)
		if err != nil {
			t.Errorf("a login begun before the drain: %v", err)
		}
		loggedIn <- c
	}()
	<-loginReached
	time.Sleep(300 * time.Millisecond) // the sleep is running

	drained := make(chan time.Duration, 1)
	go func() {
		start := time.Now()
		r.Drain(ctx, 30*time.Second)
		drained <- time.Since(start)
	}()

	// New connections are refused at TCP, so that clients with another
	// router to try (libpq, pgx, a load balancer) move on at once.
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.Dial("tcp", r.Addr())
		if errors.Is(err, syscall.ECONNREFUSED) {
			break
		}
		if c != nil {
			c.Close()
		}
		if time.Now().After(deadline) {
			t.Fatalf("a new connection while draining: %v, want it refused", err)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The one accepted before is answered as by a Postgres shutting down.
	frontend.Send(&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "postgres", "database": "postgres"}})
	if err := frontend.Flush(); err != nil {
		t.Fatal(err)
	}
	accepted.SetReadDeadline(time.Now().Add(10 * time.Second))
	if msg, err := frontend.Receive(); err != nil {
		t.Fatalf("the startup of a connection accepted before the drain: %v, want 57P03", err)
	} else if e, ok := msg.(*pgproto3.ErrorResponse); !ok || e.Code != "57P03" {
		t.Fatalf("the startup of a connection accepted before the drain: %#v, want 57P03", msg)
	}
	// A new router may listen on the address while this one drains (its
	// transaction below is still open).
	if l, err := net.Listen("tcp", r.Addr()); err != nil {
		t.Errorf("listening on a draining router's address: %v", err)
	} else {
		l.Close()
	}

	// The client that logged in as the drain began runs its first
	// statement: the router does not close a session right after its
	// login, only once it has stayed idle.
	close(loginGate)
	if c := <-loggedIn; c != nil {
		defer c.Close(ctx)
		if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
			t.Errorf("the first statement of a session that logged in as the drain began: %v", err)
		}
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

// TestDrainResetsNoConnection: clients connecting as fast as they can
// while routers drain are refused at TCP or answered (57P03, or the
// authentication request of a router not yet draining), not reset once
// connected, which libpq does not recover from as it does from a refused
// connection: the connections the kernel had queued when the listening
// socket closed are answered too (closeListener). Only a handshake that
// completes in the moment between the last accept and the close is
// reset: measured, two in about 170 drains, against 5 to 7 in about
// every other drain with a plain close (docs/operations.md). Not
// parallel: its clients keep both cores busy.
func TestDrainResetsNoConnection(t *testing.T) {
	ctx := context.Background()
	startup, _ := (&pgproto3.StartupMessage{ProtocolVersion: pgproto3.ProtocolVersionNumber,
		Parameters: map[string]string{"user": "postgres", "database": "postgres"}}).Encode(nil)
	const drains = 10
	var refused, answered, shuttingDown, reset atomic.Int64
	var firstReset atomic.Value
	for range drains {
		r := startDrainable(t)
		addr := r.Addr()
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for range 8 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for {
					select {
					case <-stop:
						return
					default:
					}
					c, err := net.Dial("tcp", addr)
					if err != nil {
						// Refused, or reset mid-handshake: libpq tries
						// the next host after either.
						if !errors.Is(err, syscall.ECONNREFUSED) && !errors.Is(err, syscall.ECONNRESET) {
							t.Errorf("connecting to a draining router: %v", err)
							return
						}
						refused.Add(1)
						continue
					}
					c.SetDeadline(time.Now().Add(10 * time.Second))
					_, err = c.Write(startup)
					var b [1]byte
					if err == nil {
						_, err = io.ReadFull(c, b[:])
					}
					c.Close()
					if err != nil || (b[0] != 'R' && b[0] != 'E') {
						reset.Add(1)
						firstReset.CompareAndSwap(nil, fmt.Sprintf("startup answered %q, %v", b[0], err))
						continue
					}
					answered.Add(1)
				}
			}()
		}
		time.Sleep(200 * time.Millisecond)
		r.Drain(ctx, 5*time.Second)
		time.Sleep(50 * time.Millisecond)
		close(stop)
		wg.Wait()
		r.Stop(ctx)
		shuttingDown.Add(counter(t, r, "tessera_router_drain_refused_connections_total"))
	}
	t.Logf("%d drains: %d connections answered (%d of them 57P03), %d refused at TCP, %d reset once connected",
		drains, answered.Load(), shuttingDown.Load(), refused.Load(), reset.Load())
	// A bound, not zero: see above. A plain close resets about 30 in 10
	// drains; 8 leaves room for a loaded machine's slower accepts.
	if reset.Load() > 8 {
		t.Fatalf("%d connections to draining routers were reset once connected (first: %v)", reset.Load(), firstReset.Load())
	}
}

// gatedConn is a client's connection whose second write (the first after
// its startup message was answered) waits for gate.
type gatedConn struct {
	net.Conn
	writes        atomic.Int32
	reached, gate chan struct{}
}

func (c *gatedConn) Write(b []byte) (int, error) {
	if c.writes.Add(1) == 2 {
		close(c.reached)
		<-c.gate
	}
	return c.Conn.Write(b)
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
