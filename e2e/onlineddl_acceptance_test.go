package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/router"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
	"github.com/tesseradb/tessera/workflows/launch"
)

// acceptanceRowsEnv sets how many rows TestOnlineDDLAcceptanceThroughRouter
// seeds, over the three shards. CI runs the default; the acceptance
// figures (docs/operations.md) come from a run at 1,000,000.
const acceptanceRowsEnv = "TESSERA_ONLINEDDL_ROWS"

const defaultAcceptanceRows = 100_000

// acceptanceTopology spreads database shop's group over three shards.
const acceptanceTopology = `{
  "authoritative_shard_group": "main",
  "shard_indexes": {"id_xx": {"type": "xxhash", "columns": ["id"]}},
  "shard_groups": [
    {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
    {"uid": "data", "default_shard_index": "id_xx", "key_ranges": [
      {"shard_uid": "shard-1", "end": "55"},
      {"shard_uid": "shard-2", "start": "55", "end": "aa"},
      {"shard_uid": "shard-3", "start": "aa"}]}
  ],
  "databases": {"shop": {"default_shard_group": "data"}}
}`

// acceptanceDDL makes, on every shard: orders, the migrated table (an
// integer key, a serial's owned sequence, a foreign key to it, a view on
// it), and orders_plain, its equal that the same ALTER changes plainly.
var acceptanceDDL = []string{
	"CREATE TABLE orders (id integer PRIMARY KEY, name text, note text, payload text, seq serial)",
	"CREATE TABLE order_notes (id integer PRIMARY KEY REFERENCES orders (id), note text)",
	"CREATE VIEW named_orders AS SELECT id, name FROM orders WHERE name IS NOT NULL",
	"CREATE TABLE orders_plain (id integer PRIMARY KEY, name text, note text, payload text, seq serial)",
}

// TestOnlineDDLAcceptanceThroughRouter is issue #15's acceptance run.
// Tables of N rows (acceptanceRowsEnv) over three shards; four clients
// insert, update, delete and re-insert rows through the router
// throughout. First the baseline: ALTER TABLE orders_plain ALTER COLUMN
// id TYPE bigint sent plainly through the router. Then the same ALTER of
// orders from a session with tessera.ddl_strategy 'online_wait' (the
// shadow path), then ADD COLUMN … NOT NULL DEFAULT 0 the same way (the
// direct path), then a shadow-path change held for revert and reverted.
// After each: every acknowledged write is there (through the router and
// on its shard), the bulk rows are intact, and no client statement of
// the online runs failed; after the swap the foreign key, the view and
// the owned sequence work through the router. Each shard's lock time and
// each writer's longest pause are logged against the baseline's.
func TestOnlineDDLAcceptanceThroughRouter(t *testing.T) {
	n := int64(defaultAcceptanceRows)
	if v := os.Getenv(acceptanceRowsEnv); v != "" {
		var err error
		if n, err = strconv.ParseInt(v, 10, 64); err != nil || n < 100 || n >= 100_000_000 {
			t.Fatalf("%s=%q: want a row count from 100 to 99,999,999", acceptanceRowsEnv, v)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute+time.Duration(n)*time.Minute/20_000)
	defer cancel()
	rc := startReshardClusterOf(t, ctx, []string{"shard-1", "shard-2", "shard-3"}, nil)
	top, err := topo.Parse([]byte(acceptanceTopology))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.c.Store().ApplyTopology(ctx, top, store.ApplyOptions{Force: true, ExpectedRevision: store.AnyRevision}); err != nil {
		t.Fatal(err)
	}
	rc.bulkKeys = n
	for _, s := range append([]string{"shard-0"}, rc.shards...) {
		conn := rc.direct(t, ctx, s)
		for _, sql := range acceptanceDDL {
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %s: %v", s, sql, err)
			}
		}
	}
	addr := rc.onlineDDLRouter(t, ctx)
	seeded := time.Now()
	perShard := rc.copyBulk(t, ctx, "orders", n)
	rc.copyBulk(t, ctx, "orders_plain", n)
	t.Logf("seeded %d rows into each of orders and orders_plain in %s: %v per shard; load %s", n, time.Since(seeded).Round(time.Millisecond), perShard, loadAvg())
	ddl := connectTo(t, ctx, addr)
	// Notes of bulk orders, which the foreign key must keep pointing at
	// the table in place.
	for id := 1; id <= 30; id++ {
		if _, err := ddl.Exec(ctx, "INSERT INTO order_notes (id, note) VALUES ($1, 'note')", id); err != nil {
			t.Fatal(err)
		}
	}
	hold := &sync.RWMutex{}

	// The baseline: the same ALTER sent plainly.
	plain := rc.startWriters(t, ctx, addr, hold, "orders_plain")
	time.Sleep(2 * time.Second)
	var plainErr error
	plainGaps, plainTook := pauseAround(t, plain.clients, func() {
		_, plainErr = ddl.Exec(ctx, "ALTER TABLE orders_plain ALTER COLUMN id TYPE bigint")
	})
	if plainErr != nil {
		t.Fatalf("the plain ALTER: %v", plainErr)
	}
	rc.checkRows(t, ctx, hold, plain.clients, "after the plain ALTER")
	acked, errs := plain.stop()
	t.Logf("baseline: ALTER TABLE orders_plain ALTER COLUMN id TYPE bigint through the router, plainly, on %d rows: took %s; writers' longest pauses %v; %d acknowledged writes, %d client errors (%q); load %s",
		n, plainTook.Round(time.Millisecond), plainGaps, acked, len(errs), errs, loadAvg())
	if _, err := ddl.Exec(ctx, "DROP TABLE orders_plain"); err != nil {
		t.Fatal(err)
	}

	// The shadow path from psql's session, under the same writers.
	online := rc.startWriters(t, ctx, addr, hold, "orders")
	time.Sleep(2 * time.Second)
	if _, err := ddl.Exec(ctx, "SET tessera.ddl_strategy = 'online_wait'"); err != nil {
		t.Fatal(err)
	}
	const alter = "ALTER TABLE orders ALTER COLUMN id TYPE bigint"
	var res workflows.OnlineDDLResult
	stopWatching := rc.watchMigration(t, ctx, workflows.OnlineDDLID("shop", "public", "orders"))
	gaps, took := pauseAround(t, online.clients, func() { res = onlineWait(t, ctx, ddl, alter) })
	stopWatching()
	if res.Phase != workflows.PhaseDone || res.Plan == nil || res.Plan.Path != workflows.PathShadow ||
		res.SchemaCheck == nil || len(res.SchemaCheck.Differences) != 0 {
		t.Fatalf("%s: %+v", alter, res.OnlineDDLProgress)
	}
	t.Logf("%s with online_wait on %d rows over %d shards: answered after %s; writers' longest pauses %v; load %s",
		alter, n, len(rc.shards), took.Round(time.Millisecond), gaps, loadAvg())
	for _, s := range res.Shards {
		t.Logf("shard %s: %s, %d rows copied, the swap held the lock %.1f ms, %d attempts", s.Shard, s.Shadow, s.Rows, s.Millis, s.Attempts)
		if s.Shadow != workflows.ShadowCompleted {
			t.Errorf("shard %s: %s, want completed", s.Shard, s.Shadow)
		}
	}
	rc.checkColumnType(t, ctx, "orders", "id", "bigint")
	rc.checkRows(t, ctx, hold, online.clients, "after the swap")
	rc.checkBulk(t, ctx, "orders", perShard)
	rc.checkDependents(t, ctx, ddl)

	// A change Postgres makes without a rewrite takes the direct path,
	// whatever the table's size.
	const addColumn = "ALTER TABLE orders ADD COLUMN qty int NOT NULL DEFAULT 0"
	gaps, took = pauseAround(t, online.clients, func() { res = onlineWait(t, ctx, ddl, addColumn) })
	if res.Phase != workflows.PhaseDone || res.Plan == nil || res.Plan.Path != workflows.PathDirect {
		t.Fatalf("%s: %+v, want done on the direct path", addColumn, res.OnlineDDLProgress)
	}
	t.Logf("%s with online_wait: answered after %s; writers' longest pauses %v", addColumn, took.Round(time.Millisecond), gaps)
	for _, s := range res.Shards {
		t.Logf("shard %s: %s after %d attempts, the statement ran %.1f ms", s.Shard, s.State, s.Attempts, s.Millis)
		if s.State != workflows.ShardDone {
			t.Errorf("shard %s: %s", s.Shard, s.State)
		}
	}
	var zeros int64
	if err := ddl.QueryRow(ctx, "SELECT count(*) FROM orders WHERE qty = 0 AND id <= $1", simple, n).Scan(&zeros); err != nil || zeros != n {
		t.Errorf("through the router %d bulk rows have qty 0 (%v), want %d", zeros, err, n)
	}

	// Held for revert: swapped, written to, reverted.
	rc.revertUnderWriters(t, ctx, online.clients, hold, perShard)

	acked, errs = online.stop()
	for _, e := range errs {
		t.Errorf("writer error: %s", e)
	}
	for _, c := range online.clients {
		for _, a := range c.anomalies {
			t.Errorf("writer %d: %s", c.id, a)
		}
	}
	t.Logf("%d writers: %d acknowledged writes through the router over the online runs, %d errors; load %s", len(online.clients), acked, len(errs), loadAvg())
	rc.checkMigrationLeftNothing(t, ctx)
}

// revertUnderWriters runs a shadow-path change held for revert, checks
// the writes made after the swap, reverts it, and checks that the old
// schema is back with every write.
func (rc *reshardCluster) revertUnderWriters(t *testing.T, ctx context.Context, clients []*reshardClient, hold *sync.RWMutex, perShard map[string]int64) {
	t.Helper()
	const change = "ALTER TABLE orders ALTER COLUMN name TYPE varchar(64)"
	id := workflows.OnlineDDLID("shop", "public", "orders")
	var run client.WorkflowRun
	stopWatching := rc.watchMigration(t, ctx, id)
	defer stopWatching()
	gaps, took := pauseAround(t, clients, func() {
		var err error
		in := workflows.OnlineDDLInput{Database: "shop", SQL: change, HoldForRevert: true}
		run, err = tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.OnlineDDLName, in)
		if err != nil {
			t.Fatal(err)
		}
		for {
			var p workflows.OnlineDDLProgress
			if v, err := tc.QueryWorkflow(ctx, id, run.GetRunID(), workflows.OnlineDDLProgressQuery); err == nil && v.Get(&p) == nil {
				if p.Phase == workflows.PhaseSwapped {
					return
				}
				if p.Error != "" {
					t.Fatalf("%s: %+v", change, p)
				}
			}
			if ctx.Err() != nil {
				t.Fatalf("%s: not swapped: %v", change, ctx.Err())
			}
			time.Sleep(500 * time.Millisecond)
		}
	})
	t.Logf("%s held for revert: swapped after %s; writers' longest pauses %v", change, took.Round(time.Millisecond), gaps)
	rc.checkColumnType(t, ctx, "orders", "name", "character varying(64)")
	time.Sleep(3 * time.Second) // writes after the swap, which the revert must carry back
	rc.checkRows(t, ctx, hold, clients, "swapped, held for revert")
	var res workflows.OnlineDDLResult
	gaps, took = pauseAround(t, clients, func() {
		h, err := tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: workflows.OnlineDDLRevertUpdate,
			WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = h.Get(ctx, nil)
		}
		if err != nil {
			t.Fatalf("Revert: %v", err)
		}
		// The update is done once the revert has begun; the run ends
		// once every shard has swapped back.
		if err := run.Get(ctx, &res); err != nil || res.Phase != workflows.PhaseReverted {
			t.Fatalf("the reverted migration ended %+v, %v", res.OnlineDDLProgress, err)
		}
	})
	t.Logf("Revert with writers on: took %s; writers' longest pauses %v", took.Round(time.Millisecond), gaps)
	for _, s := range res.Shards {
		t.Logf("shard %s: %s, %d rows copied, the revert held the lock %.1f ms", s.Shard, s.Shadow, s.Rows, s.Millis)
		if s.Shadow != workflows.ShadowReverted {
			t.Errorf("shard %s: %s, want reverted", s.Shard, s.Shadow)
		}
	}
	rc.checkColumnType(t, ctx, "orders", "name", "text")
	rc.checkColumnType(t, ctx, "orders", "id", "bigint")
	rc.checkRows(t, ctx, hold, clients, "after Revert")
	rc.checkBulk(t, ctx, "orders", perShard)
}

// watchMigration logs, until stopped, each change of the latest run of
// migration id's phase and shards' shadow states, and of the table
// buffers in force (which hold the table's statements in every router,
// on every shard), with the time since it was called: where a long
// migration spends its time, and how long writers are held.
func (rc *reshardCluster) watchMigration(t *testing.T, ctx context.Context, id string) (stop func()) {
	watching, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	began := time.Now()
	buffers, err := rc.c.Store().WatchTableBuffers(watching)
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		defer func() { done <- struct{}{} }()
		for list := range buffers {
			var in []string
			for _, b := range list {
				in = append(in, b.Reason)
			}
			t.Logf("after %s: table buffers %q", time.Since(began).Round(10*time.Millisecond), in)
		}
	}()
	go func() {
		defer func() { done <- struct{}{} }()
		last := ""
		for watching.Err() == nil {
			var p workflows.OnlineDDLProgress
			if v, err := tc.QueryWorkflow(watching, id, "", workflows.OnlineDDLProgressQuery); err == nil && v.Get(&p) == nil {
				now := p.Phase
				for _, s := range p.Shards {
					now += fmt.Sprintf(" %s:%s", s.Shard, s.Shadow)
				}
				if now != last {
					t.Logf("after %s: %s", time.Since(began).Round(100*time.Millisecond), now)
					last = now
				}
			}
			select {
			case <-watching.Done():
			case <-time.After(time.Second):
			}
		}
	}()
	return func() { cancel(); <-done; <-done }
}

// onlineDDLRouter starts a router whose sessions' tessera.ddl_strategy
// starts migrations on the package's Temporal server (which the
// cluster's worker serves) and returns its address.
func (rc *reshardCluster) onlineDDLRouter(t *testing.T, ctx context.Context) string {
	t.Helper()
	starter := &launch.RouterOnlineDDL{Addr: temporalSrv.FrontendAddr()}
	t.Cleanup(func() { starter.Close() })
	r, err := router.New(router.Config{ListenAddr: "127.0.0.1:0", Store: rc.c.Store(), Secret: rc.c.Secret(), OnlineDDL: starter})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(context.Background()) })
	return r.Addr()
}

func connectTo(t *testing.T, ctx context.Context, addr string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@%s/shop?sslmode=disable", addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// onlineWait sends sql as psql would (the simple protocol) in a session
// whose tessera.ddl_strategy is 'online_wait', and returns how the
// migration the answer names ended.
func onlineWait(t *testing.T, ctx context.Context, conn *pgx.Conn, sql string) workflows.OnlineDDLResult {
	t.Helper()
	out, err := conn.PgConn().Exec(ctx, sql).ReadAll()
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if len(out) != 1 || len(out[0].Rows) != 1 || len(out[0].Rows[0]) != 2 {
		t.Fatalf("%s answered %+v: want one row (migration_id, run_id)", sql, out)
	}
	var res workflows.OnlineDDLResult
	if err := tc.GetWorkflow(ctx, string(out[0].Rows[0][0]), string(out[0].Rows[0][1])).Get(ctx, &res); err != nil {
		t.Fatalf("%s: the migration: %v", sql, err)
	}
	return res
}

// writerSet is reshardWriters clients writing one table through a router.
type writerSet struct {
	clients []*reshardClient
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// startWriters seeds 200 keys of each writer into table (integer-keyed),
// each on the shard its key routes to, and starts the writers.
func (rc *reshardCluster) startWriters(t *testing.T, ctx context.Context, addr string, hold *sync.RWMutex, table string) *writerSet {
	t.Helper()
	ws := &writerSet{}
	var keys []int64
	var rows [][]any
	for i := range reshardWriters {
		c := newTablesClient(i, connectTo(t, ctx, addr), hold, []shardTable{{table, "integer"}})
		for _, r := range c.seed(200)[0] {
			k, _ := strconv.ParseInt(r[0].(string), 10, 64)
			keys = append(keys, k)
			rows = append(rows, append([]any{k}, r[1:]...))
		}
		ws.clients = append(ws.clients, c)
	}
	rc.copyRouted(t, ctx, table, keys, func(i int) []any { return rows[i] })
	writing, cancel := context.WithCancel(ctx)
	ws.cancel = cancel
	for _, c := range ws.clients {
		ws.wg.Add(1)
		go func() { defer ws.wg.Done(); c.run(writing) }()
	}
	t.Cleanup(func() { ws.stop() })
	return ws
}

// stop stops the writers and returns their acknowledged writes and errors.
func (ws *writerSet) stop() (acked int, errs []string) {
	ws.cancel()
	ws.wg.Wait()
	for _, c := range ws.clients {
		c.mu.Lock()
		acked += c.acked
		for _, e := range c.errs {
			errs = append(errs, fmt.Sprintf("writer %d: %s", c.id, e))
		}
		c.mu.Unlock()
	}
	return acked, errs
}

// pauseAround runs do under the writers and returns how long it took and
// each writer's longest gap between acknowledged writes from its start
// until every writer has had a write acknowledged after it returned.
func pauseAround(t *testing.T, clients []*reshardClient, do func()) ([]time.Duration, time.Duration) {
	t.Helper()
	asked := time.Now()
	for _, c := range clients {
		c.resetGap(asked)
	}
	do()
	returned := time.Now()
	gaps := make([]time.Duration, len(clients))
	eventually(t, time.Minute, "every writer writes afterwards", func() error {
		for i, c := range clients {
			gap, after := c.gapSince(returned)
			if !after {
				return fmt.Errorf("writer %d has no acknowledged write since", c.id)
			}
			gaps[i] = gap.Round(time.Millisecond)
		}
		return nil
	})
	return gaps, returned.Sub(asked)
}

// bulkRow is the bulk seed's row of key id: checkBulk recognises it.
func bulkRow(id int64) []any {
	return []any{id, fmt.Sprintf("bulk-%d", id), nil, fmt.Sprintf("payload-%d-%s", id, strings.Repeat("x", 40))}
}

// copyBulk copies keys 1..n (bulkRow) into table, each on the shard its
// key routes to, and returns how many rows each shard got.
func (rc *reshardCluster) copyBulk(t *testing.T, ctx context.Context, table string, n int64) map[string]int64 {
	t.Helper()
	keys := make([]int64, n)
	for i := range keys {
		keys[i] = int64(i) + 1
	}
	return rc.copyRouted(t, ctx, table, keys, func(i int) []any { return bulkRow(keys[i]) })
}

// copyRouted copies rows (id, name, note, payload) into table with COPY
// straight into the shards, all at once, each row on the shard its key
// routes to; row(i) is the row of keys[i].
func (rc *reshardCluster) copyRouted(t *testing.T, ctx context.Context, table string, keys []int64, row func(i int) []any) map[string]int64 {
	t.Helper()
	place := rc.top().Resolve("shop", "public", table)
	byShard := map[string][]int{}
	for i, k := range keys {
		_, s, err := place.RouteInt(k)
		if err != nil {
			t.Fatal(err)
		}
		byShard[s] = append(byShard[s], i)
	}
	conns := map[string]*pgx.Conn{}
	for s := range byShard {
		conns[s] = rc.direct(t, ctx, s)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(byShard))
	counts := map[string]int64{}
	for s, idx := range byShard {
		counts[s] = int64(len(idx))
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := 0
			_, err := conns[s].CopyFrom(ctx, pgx.Identifier{table}, []string{"id", "name", "note", "payload"}, pgx.CopyFromFunc(func() ([]any, error) {
				if next == len(idx) {
					return nil, nil
				}
				next++
				return row(idx[next-1]), nil
			}))
			if err != nil {
				errs <- fmt.Errorf("%s: %w", s, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	return counts
}

// checkBulk: the bulk rows are all there, unchanged, through the router
// and on their shards.
func (rc *reshardCluster) checkBulk(t *testing.T, ctx context.Context, table string, perShard map[string]int64) {
	t.Helper()
	const intact = "SELECT count(*) FROM %s WHERE id <= $1 AND name = 'bulk-' || id AND note IS NULL AND payload = 'payload-' || id || '-' || repeat('x', 40)"
	var total int64
	for s, want := range perShard {
		var got int64
		if err := rc.direct(t, ctx, s).QueryRow(ctx, fmt.Sprintf(intact, table), rc.bulkKeys).Scan(&got); err != nil || got != want {
			t.Errorf("%s on %s: %d bulk rows intact (%v), want %d", table, s, got, err, want)
		}
		total += want
	}
	var got int64
	if err := rc.routerConn(t, ctx).QueryRow(ctx, fmt.Sprintf(intact, table), simple, rc.bulkKeys).Scan(&got); err != nil || got != total {
		t.Errorf("%s through the router: %d bulk rows intact (%v), want %d", table, got, err, total)
	}
}

// checkColumnType: every shard that holds table has column as typ.
func (rc *reshardCluster) checkColumnType(t *testing.T, ctx context.Context, table, column, typ string) {
	t.Helper()
	for _, s := range append([]string{"shard-0"}, rc.shards...) {
		var got string
		err := rc.direct(t, ctx, s).QueryRow(ctx, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute
			WHERE attrelid = $1::regclass AND attname = $2`, table, column).Scan(&got)
		if err != nil || got != typ {
			t.Errorf("%s: %s.%s is %q (%v), want %s", s, table, column, got, err, typ)
		}
	}
}

// simple makes the test's own statements through the router use the
// simple protocol. In the extended protocol a statement prepared after a
// column's type changed can be described to the client by a pooled
// backend that prepared it before the change (the old parameter types)
// and bound on one that prepared it after: seen as 22P03 "incorrect
// binary data format for int8: 4 bytes" (docs/operations.md, OnlineDDL).
const simple = pgx.QueryExecModeSimpleProtocol

// checkDependents: after the swap, through the router, the foreign key
// to orders refuses a note of a missing order and takes one of a present
// order, the view reads the table in place, and the serial's sequence,
// owned by the table in place, goes on from where it was.
func (rc *reshardCluster) checkDependents(t *testing.T, ctx context.Context, conn *pgx.Conn) {
	t.Helper()
	missing := rc.bulkKeys + 2 // no order has it: above the bulk, below the writers' keys
	_, err := conn.Exec(ctx, "INSERT INTO order_notes (id, note) VALUES ($1, 'orphan')", simple, missing)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23503" {
		t.Errorf("a note of a missing order after the swap: %v, want SQLSTATE 23503", err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO order_notes (id, note) VALUES (31, 'after the swap')", simple); err != nil {
		t.Errorf("a note of order 31 after the swap: %v", err)
	}
	var name string
	if err := conn.QueryRow(ctx, "SELECT name FROM named_orders WHERE id = 17", simple).Scan(&name); err != nil || name != "bulk-17" {
		t.Errorf("the view through the router: %q, %v; want bulk-17", name, err)
	}
	// A row of its own (above the bulk, below the writers' keys) takes
	// its seq from the sequence; it is deleted again.
	key := rc.bulkKeys + 1
	_, shard, err := rc.top().Resolve("shop", "public", "orders").RouteInt(key)
	if err != nil {
		t.Fatal(err)
	}
	var before, seq int64
	if err := rc.direct(t, ctx, shard).QueryRow(ctx, "SELECT max(seq) FROM orders").Scan(&before); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "INSERT INTO orders (id, name) VALUES ($1, 'seq') RETURNING seq", simple, key).Scan(&seq); err != nil || seq <= before {
		t.Errorf("an insert after the swap took seq %d (%v), want more than %d, the largest before it on %s", seq, err, before, shard)
	}
	if _, err := conn.Exec(ctx, "DELETE FROM orders WHERE id = $1", simple, key); err != nil {
		t.Fatal(err)
	}
	for _, s := range append([]string{"shard-0"}, rc.shards...) {
		var owned *string
		var valid bool
		err := rc.direct(t, ctx, s).QueryRow(ctx, `SELECT pg_get_serial_sequence('orders', 'seq'),
			(SELECT convalidated FROM pg_constraint WHERE conrelid = 'order_notes'::regclass AND confrelid = 'orders'::regclass)`).Scan(&owned, &valid)
		if err != nil || owned == nil || *owned != "public.orders_seq_seq" || !valid {
			t.Errorf("%s: the serial's sequence %v, the foreign key valid %v (%v): want public.orders_seq_seq, valid", s, owned, valid, err)
		}
	}
}

// checkMigrationLeftNothing: no slot, publication, origin, shadow or old
// table of a migration on any shard.
func (rc *reshardCluster) checkMigrationLeftNothing(t *testing.T, ctx context.Context) {
	t.Helper()
	for _, s := range append([]string{"shard-0"}, rc.shards...) {
		var left int64
		err := rc.direct(t, ctx, s).QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots) + (SELECT count(*) FROM pg_publication)
			+ (SELECT count(*) FROM pg_replication_origin) + (SELECT count(*) FROM pg_class WHERE relname LIKE '\_tessera\_shadow\_%' OR relname LIKE '\_tessera\_old\_%')`).Scan(&left)
		if err != nil || left != 0 {
			t.Errorf("%s: %d slots, publications, origins or tables of a migration left (%v)", s, left, err)
		}
	}
}

// loadAvg is the machine's load, as /proc/loadavg says.
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}
