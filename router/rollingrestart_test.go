package router_test

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tesseradb/tessera/dev"
	"github.com/tesseradb/tessera/router"
)

// TestRollingRestartPgbench is the acceptance point "a rolling restart of
// two routers under pgbench with reconnecting clients: no failed
// statement that was not in flight". Two pgbench processes of four
// clients each open a new connection for every transaction (-C), through
// a multi-host conninfo naming both routers, one process in each order,
// so that both routers serve sessions throughout. Each router in turn is
// drained, stopped and replaced by a new one on the same address, as a
// rolling restart of `tessera router` processes does. pgbench must end
// with every client done and no failed transaction, and each transaction
// it counts must be in the sharded tables exactly once. Not parallel, as
// TestRollingRestart.
func TestRollingRestartPgbench(t *testing.T) {
	pgbench := needPgbench(t)
	ctx := context.Background()
	store := connect(t, "store")
	// customers and orders are the store's sharded tables (on
	// customer-shard-1 and -2); this test's rows are customers 770000 to
	// 770099 and their orders, removed when it ends. A customer's name is
	// the count of transactions that updated it.
	const first, last = 770000, 770099
	mustExec(t, store,
		"CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"CREATE TABLE IF NOT EXISTS orders (order_id bigint, customer_id bigint, total numeric, PRIMARY KEY (customer_id, order_id))",
	)
	cleanup := func() {
		store.Exec(ctx, fmt.Sprintf("DELETE FROM orders WHERE customer_id BETWEEN %d AND %d", first, last))
		store.Exec(ctx, fmt.Sprintf("DELETE FROM customers WHERE customer_id BETWEEN %d AND %d", first, last))
	}
	cleanup()
	t.Cleanup(cleanup)
	var values []string
	for id := first; id <= last; id++ {
		values = append(values, fmt.Sprintf("(%d, '0')", id))
	}
	mustExec(t, store, "INSERT INTO customers (customer_id, name) VALUES "+strings.Join(values, ", "))

	// Fixed addresses, so that each router's replacement takes its
	// predecessor's, below the ephemeral port range (a port there could
	// be taken by a client's connection while its router is down).
	addrs := freeAddrs(t, dev.TestPort(24733), 2)
	routers := []*router.Server{startAt(t, addrs[0]), startAt(t, addrs[1])}

	// Each transaction inserts an order of one random customer and
	// updates another (the two are on different shards about half the
	// time: an atomic commit). Order ids are unique by client: base + the
	// client's number, then the client's transaction count.
	dir := t.TempDir()
	script := filepath.Join(dir, "tx.sql")
	if err := os.WriteFile(script, []byte(fmt.Sprintf(`\set cid random(%d, %d)
\set other random(%d, %d)
\set n :n + 1
BEGIN;
INSERT INTO orders (order_id, customer_id, total) VALUES ((:base + :client_id) * 1000000 + :n, :cid, 1);
UPDATE customers SET name = (name::bigint + 1)::text WHERE customer_id = :other;
END;
`, first, last, first, last)), 0o644); err != nil {
		t.Fatal(err)
	}
	const duration = 10 * time.Second
	const clients = 4
	pctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type run struct {
		cmd *exec.Cmd
		out strings.Builder
		log string
	}
	var runs []*run
	begun := time.Now()
	for i, order := range [][]string{{addrs[0], addrs[1]}, {addrs[1], addrs[0]}} {
		var hosts, ports []string
		for _, a := range order {
			h, p, _ := net.SplitHostPort(a)
			hosts, ports = append(hosts, h), append(ports, p)
		}
		conninfo := fmt.Sprintf("host=%s port=%s user=postgres dbname=store sslmode=disable connect_timeout=10",
			strings.Join(hosts, ","), strings.Join(ports, ","))
		r := &run{log: filepath.Join(dir, fmt.Sprintf("pgbench%d", i))}
		r.cmd = exec.CommandContext(pctx, pgbench, "-n", "-C", "-c", strconv.Itoa(clients), "-j", "2",
			"-T", strconv.Itoa(int(duration/time.Second)), "-f", script, "-D", "n=0", "-D", fmt.Sprintf("base=%d", i*clients),
			"--progress=1", "-l", "--log-prefix="+r.log, conninfo)
		r.cmd.Env = append(os.Environ(), "PGPASSWORD=postgres")
		r.cmd.Stdout, r.cmd.Stderr = &r.out, &r.out
		if err := r.cmd.Start(); err != nil {
			t.Fatal(err)
		}
		runs = append(runs, r)
	}

	// The rolling restart, while pgbench runs. Each phase lasts until the
	// next one begins; the last, until pgbench ends.
	type phase struct {
		name  string
		start time.Time
	}
	phases := []phase{{"warm-up", begun}}
	time.Sleep(1500 * time.Millisecond)
	for i := range routers {
		other := routers[1-i]
		before := statements(t, other)
		start := time.Now()
		phases = append(phases, phase{fmt.Sprintf("router %d draining", i+1), start})
		routers[i].Drain(ctx, 5*time.Second)
		drained := time.Since(start)
		phases = append(phases, phase{fmt.Sprintf("router %d stopped, its replacement starting", i+1), time.Now()})
		old := routers[i]
		old.Stop(ctx)
		served := statements(t, old)
		routers[i] = startAt(t, addrs[i])
		phases = append(phases, phase{fmt.Sprintf("router %d replaced", i+1), time.Now()})
		duringRestart := statements(t, other) - before
		t.Logf("router %d (%s): served %d statements, drained in %v (%d connections accepted before answered 57P03), replaced after %v; router %d served %d statements meanwhile",
			i+1, addrs[i], served, drained.Round(time.Millisecond), counter(t, old, "tessera_router_drain_refused_connections_total"),
			time.Since(start).Round(time.Millisecond), 2-i, duringRestart)
		if served == 0 || duringRestart == 0 {
			t.Errorf("router %d served %d statements before its restart, router %d %d during it: want both > 0", i+1, served, 2-i, duringRestart)
		}
		time.Sleep(1500 * time.Millisecond)
	}
	if left := duration - time.Since(begun); left < time.Second {
		t.Errorf("the rolling restart ended %v before pgbench's run: make -T longer", left)
	}

	// pgbench's verdict, and what is in the tables.
	processed := regexp.MustCompile(`(?m)^number of transactions actually processed: ([0-9]+)`)
	var total int64
	for i, r := range runs {
		err := r.cmd.Wait()
		out := r.out.String()
		m := processed.FindStringSubmatch(out)
		if err != nil || m == nil || !strings.Contains(out, "\nnumber of failed transactions: 0 (") || strings.Contains(out, "aborted") {
			t.Errorf("pgbench %d (hosts %s first): %v\n%s", i+1, []string{addrs[0], addrs[1]}[i], err, out)
			continue
		}
		n, _ := strconv.ParseInt(m[1], 10, 64)
		total += n
		t.Logf("pgbench %d: %d transactions, 0 failed", i+1, n)
	}
	for i, r := range routers {
		if n := statements(t, r); n == 0 {
			t.Errorf("router %d's replacement served no statement", i+1)
		}
	}
	var orders, updates int64
	for _, shard := range []string{"customer-shard-1", "customer-shard-2"} {
		conn := direct(t, shard, "store")
		var o, u int64
		if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT (SELECT count(*) FROM orders WHERE customer_id BETWEEN %[1]d AND %[2]d), "+
			"(SELECT coalesce(sum(name::bigint), 0) FROM customers WHERE customer_id BETWEEN %[1]d AND %[2]d)", first, last)).Scan(&o, &u); err != nil {
			t.Fatal(err)
		}
		orders, updates = orders+o, updates+u
	}
	if t.Failed() {
		return
	}
	if orders != total || updates != total || total == 0 {
		t.Fatalf("pgbench counted %d transactions; the shards hold %d of their orders and %d of their updates", total, orders, updates)
	}

	// Per phase, from pgbench's transaction logs: transactions ended, and
	// the longest time without one.
	var ends []time.Time
	for _, r := range runs {
		ends = append(ends, transactionEnds(t, r.log)...)
	}
	slices.SortFunc(ends, func(a, b time.Time) int { return a.Compare(b) })
	if int64(len(ends)) != total {
		t.Errorf("pgbench's logs hold %d transactions, its summaries %d", len(ends), total)
	}
	phaseOf := func(at time.Time) int {
		i := 0
		for i+1 < len(phases) && !at.Before(phases[i+1].start) {
			i++
		}
		return i
	}
	counts := make([]int, len(phases))
	gaps := make([]time.Duration, len(phases))
	for i, e := range ends {
		p := phaseOf(e)
		counts[p]++
		if i > 0 {
			// A gap counts for the phase it began in.
			if d := e.Sub(ends[i-1]); d > gaps[phaseOf(ends[i-1])] {
				gaps[phaseOf(ends[i-1])] = d
			}
		}
	}
	for i, p := range phases {
		end := ends[len(ends)-1]
		if i+1 < len(phases) {
			end = phases[i+1].start
		}
		t.Logf("%s (%v): %d transactions; longest time without one ending: %v",
			p.name, end.Sub(p.start).Round(time.Millisecond), counts[i], gaps[i].Round(time.Millisecond))
	}
	t.Logf("%d transactions by %d clients, 0 failed", total, 2*clients)
}

// needPgbench returns pgbench's path; without it the test is skipped,
// except in CI, where it fails (Postgres's server package, which the
// tests need, brings it).
func needPgbench(t *testing.T) string {
	t.Helper()
	if found, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench"); len(found) > 0 {
		return found[len(found)-1]
	}
	needDriver(t, "pgbench (apt-get install postgresql)", exec.Command("pgbench", "--version"))
	return "pgbench"
}

// freeAddrs returns n addresses on 127.0.0.1 whose ports are free, the
// first ones from base on.
func freeAddrs(t *testing.T, base, n int) []string {
	t.Helper()
	var addrs []string
	for port := base; len(addrs) < n && port < base+100; port++ {
		addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
		if l, err := net.Listen("tcp", addr); err == nil {
			l.Close()
			addrs = append(addrs, addr)
		}
	}
	if len(addrs) < n {
		t.Fatalf("no %d free ports from %d", n, base)
	}
	return addrs
}

// startAt starts a router on the package's cluster listening on addr;
// Stop runs when the test ends.
func startAt(t *testing.T, addr string) *router.Server {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := router.New(router.Config{ListenAddr: addr, Store: cluster.Store(), Secret: cluster.Secret()})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(context.Background()) })
	return r
}

// statements is how many statements a router has run.
func statements(t *testing.T, r *router.Server) int64 {
	t.Helper()
	return counter(t, r, "tessera_router_statements_total")
}

// counter is the sum of a router's counter over its labels.
func counter(t *testing.T, r *router.Server, name string) int64 {
	t.Helper()
	families, err := r.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	var n float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			n += m.GetCounter().GetValue()
		}
	}
	return int64(n)
}

// transactionEnds reads the per-transaction logs pgbench -l wrote with
// the prefix (one file a thread) and returns when each transaction that
// did not fail ended.
func transactionEnds(t *testing.T, prefix string) []time.Time {
	t.Helper()
	files, _ := filepath.Glob(prefix + ".*")
	var ends []time.Time
	for _, name := range files {
		f, err := os.Open(name)
		if err != nil {
			t.Fatal(err)
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// client_id transaction_no time script_no time_epoch time_us
			fields := strings.Fields(sc.Text())
			if len(fields) < 6 || fields[2] == "failed" || fields[2] == "skipped" {
				continue
			}
			sec, err1 := strconv.ParseInt(fields[4], 10, 64)
			usec, err2 := strconv.ParseInt(fields[5], 10, 64)
			if err1 != nil || err2 != nil {
				t.Fatalf("%s: %q", name, sc.Text())
			}
			ends = append(ends, time.Unix(sec, usec*1000))
		}
		f.Close()
	}
	return ends
}
