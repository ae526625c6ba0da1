package router_test

import (
	"context"
	"crypto/rand"
	"fmt"
	"net"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/router"
)

// TestHostileClientsHarmNoOne: a few hundred connections that connect
// and say nothing, send garbage, announce huge messages, start SCRAM and
// stop, or fail logins as roles that do not exist, cost the clients that
// behave little: their logins and queries are timed without the attack
// and during it, in the same test, and at the 99th percentile must stay
// within 10x the baseline or under a second. Everything goes to 127.0.0.1 and
// ends within seconds.
func TestHostileClientsHarmNoOne(t *testing.T) {
	if testing.Short() {
		t.Skip("load test")
	}
	addr := startRouterWith(t, router.Config{AuthTimeout: 2 * time.Second})
	dsn := "postgres://postgres:postgres@" + addr + "/postgres?sslmode=disable"
	ctx := context.Background()
	base := measureNormalClients(t, dsn, 1500*time.Millisecond)

	stop := make(chan struct{})
	var hostile sync.WaitGroup
	var opened atomic.Int32
	attack := func(n int, fn func(i int)) {
		for i := range n {
			hostile.Add(1)
			go func() { defer hostile.Done(); fn(i) }()
		}
	}
	var held []net.Conn
	var heldMu sync.Mutex
	hold := func(c net.Conn) {
		heldMu.Lock()
		held = append(held, c)
		heldMu.Unlock()
		opened.Add(1)
	}
	dial := func() net.Conn {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			return nil
		}
		return c
	}
	// Connect and say nothing.
	attack(100, func(int) {
		if c := dial(); c != nil {
			hold(c)
		}
	})
	// Start SCRAM as a role that does not exist, and stop.
	attack(100, func(i int) {
		c := dial()
		if c == nil {
			return
		}
		hold(c)
		c.Write(startupPacket(3<<16, "user", fmt.Sprintf("ghost_%d", i), "database", "postgres"))
		fe := pgproto3.NewFrontend(c, c)
		fe.Send(&pgproto3.SASLInitialResponse{AuthMechanism: "SCRAM-SHA-256", Data: []byte("n,,n=,r=abcdefgh")})
		fe.Flush()
	})
	// Announce a startup packet or a password message larger than the
	// limits, then send nothing more.
	attack(50, func(i int) {
		c := dial()
		if c == nil {
			return
		}
		hold(c)
		if i%2 == 0 {
			c.Write([]byte{0x10, 0, 0, 0, 0, 3, 0, 0})
			return
		}
		c.Write(startupPacket(3<<16, "user", "postgres", "database", "postgres"))
		c.Write([]byte{'p', 0x10, 0, 0, 0})
	})
	// Garbage, again and again, until the attack ends.
	attack(10, func(int) {
		b := make([]byte, 512)
		for {
			select {
			case <-stop:
				return
			default:
			}
			c := dial()
			if c == nil {
				return
			}
			opened.Add(1)
			rand.Read(b)
			c.SetDeadline(time.Now().Add(time.Second))
			c.Write(b)
			c.Read(b)
			c.Close()
			// Paced: on a shared 2-core machine an unpaced loop in this
			// process would measure the test's own CPU, not the router.
			time.Sleep(10 * time.Millisecond)
		}
	})
	// Whole failed logins as roles and databases that do not exist, each
	// a new name: every one a reason to reload the roles.
	attack(2, func(i int) {
		for n := 0; ; n++ {
			select {
			case <-stop:
				return
			default:
			}
			opened.Add(1)
			c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://ghost_%d_%d:pw@%s/nowhere_%d?sslmode=disable", i, n, addr, n))
			if err == nil {
				c.Close(ctx)
				t.Error("a ghost logged in")
			}
		}
	})
	time.Sleep(200 * time.Millisecond) // the idle ones are in
	during := measureNormalClients(t, dsn, 1500*time.Millisecond)
	close(stop)
	hostile.Wait()

	t.Logf("%d hostile connections; logins p50 %v p99 %v without, p50 %v p99 %v during; queries p50 %v p99 %v without, p50 %v p99 %v during",
		opened.Load(), base.logins.p(50), base.logins.p(99), during.logins.p(50), during.logins.p(99),
		base.queries.p(50), base.queries.p(99), during.queries.p(50), during.queries.p(99))
	for _, m := range []struct {
		name         string
		base, during latencies
	}{{"login", base.logins, during.logins}, {"query", base.queries, during.queries}} {
		if len(m.during) == 0 {
			t.Errorf("no %s completed during the attack", m.name)
			continue
		}
		// Within 10x the baseline or under a second: either bound alone
		// would flake on a shared 2-core machine (tiny baselines; others'
		// load slowing both phases), and a router stalled by the attack
		// (logins waiting on the role cache or the timeout) breaks both.
		limit := max(10*m.base.p(99), time.Second)
		if p := m.during.p(99); p > limit {
			t.Errorf("%s p99 %v during the attack, %v without", m.name, p, m.base.p(99))
		}
	}
	// The idle and stalled connections are closed by the authentication
	// timeout.
	heldMu.Lock()
	defer heldMu.Unlock()
	deadline := time.Now().Add(4 * time.Second)
	for i, c := range held {
		c.SetReadDeadline(deadline)
		var b [256]byte
		for {
			if _, err := c.Read(b[:]); err != nil {
				if ne, ok := err.(net.Error); ok && ne.Timeout() {
					t.Fatalf("hostile connection %d still open after the authentication timeout", i)
				}
				break
			}
		}
		c.Close()
	}
}

type latencies []time.Duration

// p is the q-th percentile.
func (l latencies) p(q int) time.Duration {
	if len(l) == 0 {
		return 0
	}
	s := slices.Clone(l)
	slices.Sort(s)
	return s[min(len(s)-1, len(s)*q/100)]
}

type normalFigures struct{ logins, queries latencies }

// measureNormalClients times, for d, logins (connect, SELECT 1, close) on
// one client and SELECT 1 on an established connection on another.
func measureNormalClients(t *testing.T, dsn string, d time.Duration) normalFigures {
	t.Helper()
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var f normalFigures
	end := time.Now().Add(d)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for time.Now().Before(end) {
			start := time.Now()
			c, err := pgx.Connect(ctx, dsn)
			if err != nil {
				t.Errorf("login: %v", err)
				return
			}
			_, err = c.Exec(ctx, "SELECT 1")
			c.Close(ctx)
			if err != nil {
				t.Errorf("login query: %v", err)
				return
			}
			f.logins = append(f.logins, time.Since(start))
		}
	}()
	for time.Now().Before(end) {
		start := time.Now()
		if _, err := conn.Exec(ctx, "SELECT 1"); err != nil {
			t.Fatalf("query: %v", err)
		}
		f.queries = append(f.queries, time.Since(start))
		time.Sleep(2 * time.Millisecond)
	}
	wg.Wait()
	return f
}
