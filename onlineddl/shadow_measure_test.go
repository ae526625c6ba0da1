package onlineddl

import (
	"log/slog"
	"testing"
	"time"

	"github.com/tesseradb/tessera/workflows"
)

// measureRows is the size of the table the swap's lock is measured on.
const measureRows = 300000

// TestShadowSwapLockAgainstTheSameALTERRunDirectly changes orders.id to
// bigint on a table of measureRows rows while two clients write to it,
// through the shadow path on s1 and directly (ApplyDDL) on s2, and logs
// how long each held the table's lock and each shard's longest pause
// between a writer's writes (docs/operations.md records the figures). It
// asserts no timing: only that no acknowledged write is lost, no write
// fails, and both end on the new type.
func TestShadowSwapLockAgainstTheSameALTERRunDirectly(t *testing.T) {
	a := newActivities(t, "sh", `CREATE TABLE customers (id int PRIMARY KEY);
		INSERT INTO customers VALUES (1);
		CREATE TABLE orders (id serial PRIMARY KEY, customer_id int NOT NULL REFERENCES customers (id),
			amount int NOT NULL, note text);
		INSERT INTO orders (customer_id, amount, note) SELECT 1, g % 100, md5(g::text) FROM generate_series(1, 300000) g`)
	slog.SetLogLoggerLevel(slog.LevelDebug)
	defer slog.SetLogLoggerLevel(slog.LevelInfo)
	ctx := testCtx(t)
	const sql = "ALTER TABLE orders ALTER COLUMN id TYPE bigint"

	// The shadow path on s1.
	in := shadowInput(t, a, sql)
	in.BatchRows = 0 // the default
	conn := shardConn(t, "sh", "s1")
	w := startWriters(t, testPostgres(t).ConnConfig("sh_s1", ""), 2, 0)
	start := time.Now()
	if _, err := a.PrepareShadow(ctx, in); err != nil {
		t.Fatal(err)
	}
	res, err := a.CopyShadow(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	copied := time.Since(start)
	swap, err := retried(t, func() (workflows.ShadowResult, error) { return a.SwapShadow(ctx, in) })
	if err != nil {
		t.Fatal(err)
	}
	swapped := time.Since(start)
	if _, err := a.CompleteShadow(ctx, in); err != nil {
		t.Fatal(err)
	}
	total := time.Since(start)
	time.Sleep(200 * time.Millisecond)
	w.finish(t, conn, "orders")
	t.Logf("copied at %s, swapped at %s, completed at %s; the longest pause ended at %s",
		copied.Round(time.Millisecond), swapped.Round(time.Millisecond), total.Round(time.Millisecond), w.gapEnd.Sub(start).Round(time.Millisecond))
	t.Logf("shadow path, %d rows, 2 writers (%d writes): copy %d rows in %s, whole migration %s; lock held %.1f ms (%.1f ms of it waiting for the stream's marker); longest writer pause %s",
		measureRows, w.ops, res.Rows, copied.Round(time.Millisecond), total.Round(time.Millisecond), swap.LockMillis, swap.CatchUpMillis, w.maxGap.Round(time.Millisecond))
	if typ := scalar[string](t, conn, "SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'orders'::regclass AND attname = 'id'"); typ != "bigint" {
		t.Errorf("s1: orders.id is %s", typ)
	}

	// The same statement run directly on s2.
	p, err := a.PlanOnlineDDL(ctx, workflows.PlanOnlineDDLInput{WorkflowID: "w",
		Input: workflows.OnlineDDLInput{Database: "sh", SQL: sql, Shards: []string{"s2"}}})
	if err != nil {
		t.Fatal(err)
	}
	p.Execution = "transaction" // run it as the direct path would
	conn2 := shardConn(t, "sh", "s2")
	w2 := startWriters(t, testPostgres(t).ConnConfig("sh_s2", ""), 2, 0)
	time.Sleep(200 * time.Millisecond)
	direct, err := a.ApplyDDL(ctx, workflows.ApplyDDLInput{MigrationID: "direct", Database: "sh", Shard: "s2", SQL: sql, Plan: p, LockTimeoutMillis: 2000})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(200 * time.Millisecond)
	w2.finish(t, conn2, "orders")
	t.Logf("direct ALTER, %d rows, 2 writers (%d writes): lock held %.1f ms (the statement); longest writer pause %s",
		measureRows, w2.ops, direct.Millis, w2.maxGap.Round(time.Millisecond))
}
