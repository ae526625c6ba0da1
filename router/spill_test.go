package router_test

import (
	"bytes"
	"context"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/router"
)

// The engine's memory, proven on the store example: a sort and a GROUP BY
// whose input is 20 times the query's memory budget answer exactly what
// one Postgres holding every row answers, while the router's memory
// stays within the budget plus 64 MiB. The router runs in this test's
// process: what is measured is the growth of the Go heap
// (runtime/metrics /memory/classes/heap/objects:bytes, live and not yet
// swept objects) and of the process's resident set (/proc/self/status
// VmRSS; not checked under the race detector, whose shadow memory it
// counts) while the query runs, sampled every 5 ms. Both include the
// in-process sidecars, etcd and this test's own client, so they bound
// the router's from above.
//
// CI runs the GROUP BY … ORDER BY with a 1 MiB budget (about 20 MiB of
// partial rows); set TESSERA_SPILL_TEST_MB to a budget in MiB for a
// larger run, which adds a DISTINCT (64: the default budget, about
// 1.3 GiB of rows).

// spillOrderBase: the test's orders (order_id from here up).
const spillOrderBase = 7_000_000_000

// spillRows is how many rows each customer shard holds for a budget:
// partial rows of about 140 bytes, two per group, 20 budgets in all.
func spillRows(budget int64) int64 { return 20 * budget / 140 / 2 }

func spillBudget(t *testing.T) int64 {
	mb := int64(1)
	if v := os.Getenv("TESSERA_SPILL_TEST_MB"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1 {
			t.Fatalf("TESSERA_SPILL_TEST_MB=%q: a number of MiB", v)
		}
		mb = n
	}
	return mb << 20
}

// loadSpillRows puts n orders on each customer shard (the same order ids
// under another customer on each, so every group has a row from both)
// and the same rows in a plain database on shard-0's Postgres, which it
// returns.
func loadSpillRows(t *testing.T, n int64) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, "store")
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS orders (order_id bigint, customer_id bigint, total numeric, PRIMARY KEY (customer_id, order_id))",
		"ALTER TABLE orders ADD COLUMN IF NOT EXISTS note text",
		"ALTER TABLE orders ADD COLUMN IF NOT EXISTS qty int",
	)
	const refName = "spill_reference"
	admin := direct(t, "shard-0", "postgres")
	mustExec(t, admin, "DROP DATABASE IF EXISTS "+refName, "CREATE DATABASE "+refName)
	ref := direct(t, "shard-0", refName)
	mustExec(t, ref, "CREATE TABLE orders (order_id bigint, customer_id bigint, total numeric, note text, qty int, PRIMARY KEY (customer_id, order_id))")
	remove := fmt.Sprintf("DELETE FROM orders WHERE order_id >= %d", spillOrderBase)
	for i, shard := range []string{"customer-shard-1", "customer-shard-2"} {
		insert := fmt.Sprintf(`INSERT INTO orders (order_id, customer_id, total, note, qty)
			SELECT %d + g, %d, g, 'note-' || lpad(g::text, 100, '0'), (g * %d) %% 97 FROM generate_series(0, %d) g`,
			spillOrderBase, 900_000_000+i, i+2, n-1)
		sh := direct(t, shard, "store")
		mustExec(t, sh, remove, insert)
		mustExec(t, ref, insert)
		t.Cleanup(func() { sh.Exec(ctx, remove) })
	}
	t.Cleanup(func() {
		ref.Close(ctx)
		admin.Exec(ctx, "DROP DATABASE IF EXISTS "+refName)
	})
	return ref
}

// memorySampler samples the process's Go heap and resident set until
// stopped, and reports how far each rose above where it began.
type memorySampler struct {
	stop              chan struct{}
	done              sync.WaitGroup
	heap0, rss0       int64
	heapPeak, rssPeak atomic.Int64
	spillFiles        atomic.Int64 // most spill files open at once
}

func sampleMemory() *memorySampler {
	runtime.GC()
	m := &memorySampler{stop: make(chan struct{}), heap0: heapBytes(), rss0: rssBytes()}
	m.done.Add(1)
	go func() {
		defer m.done.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for i := 0; ; i++ {
			m.heapPeak.Store(max(m.heapPeak.Load(), heapBytes()))
			m.rssPeak.Store(max(m.rssPeak.Load(), rssBytes()))
			if i%20 == 0 {
				// Reading every descriptor's link costs more: 10 a second.
				m.spillFiles.Store(max(m.spillFiles.Load(), openSpillFiles()))
			}
			select {
			case <-m.stop:
				return
			case <-tick.C:
			}
		}
	}()
	return m
}

func (m *memorySampler) end() (heapRise, rssRise int64) {
	close(m.stop)
	m.done.Wait()
	return m.heapPeak.Load() - m.heap0, m.rssPeak.Load() - m.rss0
}

func heapBytes() int64 {
	s := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
	metrics.Read(s)
	return int64(s[0].Value.Uint64())
}

func rssBytes() int64 {
	b, _ := os.ReadFile("/proc/self/status")
	for _, line := range strings.Split(string(b), "\n") {
		if f := strings.Fields(line); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseInt(f[1], 10, 64)
			return kb << 10
		}
	}
	return 0
}

// openSpillFiles counts the engine's spill files this process has open
// (their names are removed when made: "(deleted)").
func openSpillFiles() int64 {
	entries, _ := os.ReadDir("/proc/self/fd")
	var n int64
	for _, e := range entries {
		if target, err := os.Readlink(filepath.Join("/proc/self/fd", e.Name())); err == nil && strings.Contains(target, "tessera-spill-") {
			n++
		}
	}
	return n
}

// answerDigest reads an answer as text rows, comparing it in order with
// want when want is given, and returns the row count and a digest of
// the multiset of rows (the sum of the rows' hashes), holding none.
func answerDigest(t *testing.T, conn *pgx.Conn, sql string, want [][]string) (int, uint64) {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	n := 0
	var digest uint64
	for rows.Next() {
		h := fnv.New64a()
		var line []string
		for _, v := range rows.RawValues() {
			h.Write(v)
			h.Write([]byte{0})
			if want != nil {
				line = append(line, string(v))
			}
		}
		digest += h.Sum64()
		if want != nil {
			if n >= len(want) || strings.Join(line, "|") != strings.Join(want[n], "|") {
				t.Fatalf("%s: row %d is %v, Postgres's is %v", sql, n+1, line, want[min(n, len(want)-1)])
			}
		}
		n++
	}
	if err := rows.Err(); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n, digest
}

func allRows(t *testing.T, conn *pgx.Conn, sql string) [][]string {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	var out [][]string
	for rows.Next() {
		var line []string
		for _, v := range rows.RawValues() {
			line = append(line, string(bytes.Clone(v)))
		}
		out = append(out, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestEngineOverManyRows loads the rows once for the engine's memory
// (above) and its streaming (stream_test.go).
func TestEngineOverManyRows(t *testing.T) {
	budget := spillBudget(t)
	n := spillRows(budget)
	began := time.Now()
	ref := loadSpillRows(t, n)
	t.Logf("loaded 2 × %d rows in %v", n, time.Since(began).Round(time.Millisecond))
	t.Run("spill", func(t *testing.T) { checkSpill(t, ref, budget) })
	t.Run("merge streams", func(t *testing.T) { checkMergeStreams(t, ref) })
	t.Run("error mid-stream", func(t *testing.T) { checkErrorMidStream(t, ref, n) })
}

// checkSpill runs a sort and a GROUP BY of 20 budgets (see above).
func checkSpill(t *testing.T, ref *pgx.Conn, budget int64) {
	addr := startRouterWith(t, router.Config{InProcessSidecars: true,
		Memory: router.MemoryConfig{Budget: 4 * budget, SpillDir: t.TempDir(), SpillQuota: 100 * budget}})
	conn, err := pgx.Connect(context.Background(), fmt.Sprintf("postgres://postgres:postgres@%s/store?sslmode=disable", addr))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	mustExec(t, conn, fmt.Sprintf("SET tessera.query_memory = '%dkB'", budget>>10))
	where := fmt.Sprintf("WHERE order_id >= %d", spillOrderBase)
	cases := []struct {
		name, sql string
		ordered   bool
	}{
		// Aggregate then Sort, both of n groups of two partial rows.
		{"group by, sort", "SELECT order_id, note, count(*), sum(qty), max(customer_id) FROM orders " + where + " GROUP BY order_id, note ORDER BY 4 DESC, 1", true},
		// DISTINCT: an aggregation without aggregates, answered in no
		// particular order.
		{"distinct", "SELECT DISTINCT note, qty FROM orders " + where, false},
	}
	if os.Getenv("TESSERA_SPILL_TEST_MB") == "" {
		// CI's time: the first spills an Aggregate and a Sort already;
		// the engine's own tests spill an Aggregate alone.
		cases = cases[:1]
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var want [][]string
			var wantRows int
			var wantDigest uint64
			began := time.Now()
			if c.ordered {
				want = allRows(t, ref, c.sql)
				wantRows = len(want)
			} else {
				wantRows, wantDigest = answerDigest(t, ref, c.sql, nil)
			}
			refTime := time.Since(began)
			sampler := sampleMemory()
			began = time.Now()
			gotRows, gotDigest := answerDigest(t, conn, c.sql, want)
			heapRise, rssRise := sampler.end()
			t.Logf("%s: %d rows through a budget of %d MiB in %v (Postgres: %v): Go heap rose %.1f MiB, RSS %.1f MiB; %d spill files open at most",
				c.name, gotRows, budget>>20, time.Since(began).Round(time.Millisecond), refTime.Round(time.Millisecond),
				float64(heapRise)/(1<<20), float64(rssRise)/(1<<20), sampler.spillFiles.Load())
			if gotRows != wantRows || !c.ordered && gotDigest != wantDigest {
				t.Fatalf("%d rows (digest %x), Postgres answers %d (digest %x)", gotRows, gotDigest, wantRows, wantDigest)
			}
			if sampler.spillFiles.Load() == 0 {
				t.Fatal("no spill file was open while the query ran: the input did not pass the budget")
			}
			limit := budget + 64<<20
			if heapRise > limit {
				t.Fatalf("the Go heap rose by %d bytes, over the budget plus 64 MiB (%d)", heapRise, limit)
			}
			// Under the race detector the resident set holds its shadow
			// memory too: only the heap is checked there.
			if !raceEnabled && rssRise > limit {
				t.Fatalf("the resident set rose by %d bytes, over the budget plus 64 MiB (%d)", rssRise, limit)
			}
		})
	}
	if open := openSpillFiles(); open != 0 {
		t.Fatalf("%d spill files still open after the queries", open)
	}
}

// TestQueryMemorySetting: tessera.query_memory takes sizes as Postgres's
// memory settings do (units case-sensitive, at least 64kB) and refuses
// others with 22023; the router's own budget is checked at startup.
func TestQueryMemorySetting(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "postgres")
	show := func() string {
		var v string
		if err := conn.QueryRow(ctx, "SHOW tessera.query_memory", pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := show(); v != "64MB" {
		t.Fatalf("default %q, want 64MB", v)
	}
	for value, want := range map[string]string{"'4MB'": "4MB", "2048": "2MB", "'1GB'": "1GB", "'65536B'": "64kB", "default": "64MB"} {
		mustExec(t, conn, "SET tessera.query_memory = "+value)
		if v := show(); v != want {
			t.Errorf("SET tessera.query_memory = %s shows %q, want %q", value, v, want)
		}
	}
	for _, value := range []string{"'4mb'", "'32kB'", "'lots'", "'-1MB'", "'99999999999999TB'"} {
		_, err := conn.Exec(ctx, "SET tessera.query_memory = "+value)
		if sqlstate(err) != "22023" {
			t.Errorf("SET tessera.query_memory = %s: %v, want 22023", value, err)
		}
	}
	if _, err := router.New(router.Config{ListenAddr: "127.0.0.1:0", Store: cluster.Store(), Secret: cluster.Secret(),
		Memory: router.MemoryConfig{Budget: 1000}}); err == nil || !strings.Contains(err.Error(), "memory budget") {
		t.Fatalf("a router with a budget of 1000 bytes: %v", err)
	}
}
