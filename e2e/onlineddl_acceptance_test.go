package e2e

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
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

// connectSimpleTo is connectTo in the simple query protocol. The
// acceptance tables have a serial column besides their key, whose values
// the router fills in from the authoritative shard's sequence for the
// simple protocol only: through the extended protocol an INSERT leaving
// it to its default is refused (docs/router.md).
func connectSimpleTo(t *testing.T, ctx context.Context, addr string) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://postgres:postgres@%s/shop?sslmode=disable", addr))
	if err != nil {
		t.Fatal(err)
	}
	cfg.DefaultQueryExecMode = pgx.QueryExecModeSimpleProtocol
	conn, err := pgx.ConnectConfig(ctx, cfg)
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
