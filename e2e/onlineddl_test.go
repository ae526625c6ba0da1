package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/tesseradb/tessera/onlineddl"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// onlineDDLTopology: s0 alone in the authoritative group, s1 and s2 in a
// sharded group.
const onlineDDLTopology = `{
  "authoritative_shard_group": "main",
  "shard_indexes": {"id_xx": {"type": "xxhash", "columns": ["id"]}},
  "shard_groups": [
    {"uid": "main", "key_ranges": [{"shard_uid": "s0"}]},
    {"uid": "data", "default_shard_index": "id_xx",
     "key_ranges": [{"shard_uid": "s1", "end": "80"}, {"shard_uid": "s2", "start": "80"}]}
  ],
  "databases": {"store": {"default_shard_group": "data"}}
}`

// onlineDDLRows is each shard's row count: ADD COLUMN ... NOT NULL
// DEFAULT 0 must not depend on it.
const onlineDDLRows = 200000

// TestOnlineDDLOnRealTemporal runs OnlineDDL on the real Temporal server
// with its real activities against real Postgres (a Postgres of its own,
// each shard a database of it) and a topology of its own in the cluster's
// etcd. A transaction holds a lock on s2's table for 3 s: the migration's
// attempts there time out and are retried until the lock is released, and
// every shard ends with the new column. The change takes the direct path
// on 200k rows per shard (the figures are logged). Then a statement that
// rewrites the table takes the shadow path through the CLI, with s2's
// table locked until its swap has timed out once, and every shard ends on
// the new type; a column added to one shard by hand shows in the schema
// check.
func TestOnlineDDLOnRealTemporal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	pg := reshardPostgres(t, ctx)
	shards := []string{"s0", "s1", "s2"}
	dbOf := func(shard string) string { return "store_" + shard }
	admin, err := pgx.Connect(ctx, pg.ConnConfig("postgres", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	conns := map[string]*pgx.Conn{}
	for _, s := range shards {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+dbOf(s)); err != nil {
			t.Fatal(err)
		}
		c, err := pgx.Connect(ctx, pg.ConnConfig(dbOf(s), ""))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, fmt.Sprintf(`CREATE TABLE orders (id bigint PRIMARY KEY, customer text);
			INSERT INTO orders SELECT g, 'c' || g FROM generate_series(1, %d) g`, onlineDDLRows)); err != nil {
			t.Fatal(err)
		}
		conns[s] = c
	}

	st, err := store.Dial(ctx, cluster.Info().Etcd, "onlineddl-e2e")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	top, err := topo.Parse([]byte(onlineDDLTopology))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyTopology(ctx, top, store.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	// A worker of its own on a task queue of its own, so the cluster's
	// workers (without these credentials) do not take its tasks.
	const queue = "onlineddl-e2e"
	w := sdkworker.New(tc, queue, sdkworker.Options{})
	workflows.Register(w, storeActivities(st))
	acts := &onlineddl.Activities{Store: st, Conn: connectorFunc(func(_ context.Context, shard, _ string) (string, error) {
		return pg.ConnConfig(dbOf(shard), ""), nil
	})}
	acts.Register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// s2's table is locked by a transaction that ends after 3 s.
	holder, err := pgx.Connect(ctx, pg.ConnConfig(dbOf("s2"), ""))
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close(context.Background())
	tx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "LOCK TABLE orders IN ACCESS SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	released := make(chan struct{})
	go func() {
		defer close(released)
		time.Sleep(3 * time.Second)
		tx.Rollback(context.Background())
	}()

	id := workflows.OnlineDDLID("store", "public", "orders")
	in := workflows.OnlineDDLInput{Database: "store", SQL: "ALTER TABLE orders ADD COLUMN qty int NOT NULL DEFAULT 0", LockTimeoutMillis: 500}
	started := time.Now()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue, StaticSummary: in.Summary()}, workflows.OnlineDDLName, in)
	if err != nil {
		t.Fatal(err)
	}
	var res workflows.OnlineDDLResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("the migration failed: %v", err)
	}
	t.Logf("the migration took %s (s2's lock was held for 3 s)", time.Since(started).Round(time.Millisecond))
	<-released
	if res.Phase != workflows.PhaseDone || res.Plan == nil || res.Plan.Path != workflows.PathDirect {
		t.Fatalf("result %+v: want done on the direct path", res.OnlineDDLProgress)
	}
	for _, s := range res.Shards {
		t.Logf("shard %s: %s after %d attempts, ADD COLUMN ... NOT NULL DEFAULT 0 on %d rows ran %.1f ms (last error %q)",
			s.Shard, s.State, s.Attempts, onlineDDLRows, s.Millis, s.LastError)
		if s.State != workflows.ShardDone {
			t.Errorf("shard %s: %s", s.Shard, s.State)
		}
	}
	if s2 := res.Shards[2]; s2.Shard != "s2" || s2.Attempts < 2 {
		t.Errorf("s2: %+v, want several attempts while its lock was held", s2)
	}
	// Every shard has the column, every row its default.
	for _, s := range shards {
		var n int64
		if err := conns[s].QueryRow(ctx, `SELECT count(*) FROM orders WHERE qty = 0`).Scan(&n); err != nil {
			t.Fatalf("shard %s: %v", s, err)
		}
		if n != onlineDDLRows {
			t.Errorf("shard %s: %d rows with qty 0, want %d", s, n, onlineDDLRows)
		}
	}
	// The check ran after the change, and the workflow answers it.
	var check *workflows.SchemaCheckResult
	v, err := tc.QueryWorkflow(ctx, id, run.GetRunID(), workflows.SchemaCheckQuery)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Get(&check); err != nil {
		t.Fatal(err)
	}
	if check == nil || check.Tables != 1 || len(check.Differences) != 0 {
		t.Errorf("schema check after the migration: %+v, want 1 table, no differences", check)
	}

	// The CLI: a NOT VALID constraint takes the direct path and the
	// command follows it to the end; `show` reads the ended run.
	out, progress, code := runCLI(ctx, "onlineddl", "--task-queue", queue, "--database", "store",
		"ALTER TABLE orders ADD CONSTRAINT qty_nonneg CHECK (qty >= 0) NOT VALID")
	t.Logf("tessera onlineddl: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, progress)
	if code != 0 || !strings.Contains(out, "phase: done") || !strings.Contains(out, "path:  direct") ||
		!strings.Contains(out, "0 differences") || !strings.Contains(progress, "started migration "+id) {
		t.Fatalf("tessera onlineddl: exit %d, stdout %q", code, out)
	}
	for _, s := range shards {
		if !regexpLine(out, s+` +done +1 `) {
			t.Errorf("no line saying %s is done after one attempt in:\n%s", s, out)
		}
	}
	out, _, code = runCLI(ctx, "onlineddl", "show", id)
	if code != 0 || !strings.Contains(out, "phase: done") || !strings.Contains(out, "NOT VALID") {
		t.Errorf("tessera onlineddl show: exit %d, stdout %q", code, out)
	}

	// A rewrite takes the shadow path: on every shard a shadow table is
	// copied, kept current and swapped in. s2's table is locked (ACCESS
	// SHARE, as a long reader would) until s2's swap has failed on its
	// lock_timeout at least once: the swap is retried there and every
	// shard ends on the new type.
	lockTx, err := holder.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := lockTx.Exec(ctx, "LOCK TABLE orders IN ACCESS SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	unlocked := make(chan struct{})
	go func() {
		defer close(unlocked)
		defer lockTx.Rollback(context.Background())
		for ctx.Err() == nil {
			time.Sleep(200 * time.Millisecond)
			v, err := tc.QueryWorkflow(ctx, id, "", workflows.OnlineDDLProgressQuery)
			var p workflows.OnlineDDLProgress
			if err != nil || v.Get(&p) != nil || len(p.Shards) < 3 {
				continue
			}
			if strings.Contains(p.Shards[2].LastError, "lock timeout") {
				return
			}
		}
	}()
	started = time.Now()
	out, errOut, code := runCLI(ctx, "onlineddl", "--task-queue", queue, "--database", "store", "--lock-timeout", "500ms",
		"--json", "ALTER TABLE orders ALTER COLUMN qty TYPE bigint")
	<-unlocked
	if code != 0 {
		t.Fatalf("the shadow path: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	var shadow workflows.OnlineDDLResult
	if err := json.Unmarshal([]byte(out), &shadow); err != nil {
		t.Fatalf("%v in %q", err, out)
	}
	t.Logf("the shadow path on %d rows per shard took %s", onlineDDLRows, time.Since(started).Round(time.Millisecond))
	if shadow.Phase != workflows.PhaseDone || shadow.Plan == nil || shadow.Plan.Path != workflows.PathShadow ||
		shadow.SchemaCheck == nil || len(shadow.SchemaCheck.Differences) != 0 {
		t.Fatalf("the shadow path: %+v", shadow.OnlineDDLProgress)
	}
	for _, s := range shadow.Shards {
		t.Logf("shard %s: %s, %d rows copied, the swap held the lock %.1f ms, %d attempts over all steps (last error %q)",
			s.Shard, s.Shadow, s.Rows, s.Millis, s.Attempts, s.LastError)
		if s.Shadow != workflows.ShadowCompleted {
			t.Errorf("shard %s: %s, want completed", s.Shard, s.Shadow)
		}
	}
	if s2 := shadow.Shards[2]; s2.Attempts < 5 {
		t.Errorf("s2: %d attempts, want the swap retried after its lock timeout", s2.Attempts)
	}
	for _, s := range shards {
		var typ string
		var n int64
		if err := conns[s].QueryRow(ctx, `SELECT format_type(atttypid, atttypmod), (SELECT count(*) FROM orders WHERE qty = 0)
			FROM pg_attribute WHERE attrelid = 'orders'::regclass AND attname = 'qty'`).Scan(&typ, &n); err != nil {
			t.Fatalf("shard %s: %v", s, err)
		}
		if typ != "bigint" || n != onlineDDLRows {
			t.Errorf("shard %s: qty is %s with %d rows of 0, want bigint and %d", s, typ, n, onlineDDLRows)
		}
	}

	// One shard changed by hand: the schema check names it.
	if _, err := conns["s1"].Exec(ctx, "ALTER TABLE orders ADD COLUMN note text"); err != nil {
		t.Fatal(err)
	}
	out, errOut, code = runCLI(ctx, "schema", "check", "--task-queue", queue, "--database", "store")
	t.Logf("tessera schema check: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, errOut)
	if code == 0 || !strings.Contains(errOut, "SQLSTATE 55000") ||
		!strings.Contains(out, "public.orders on s1: extra column note text (not on s0)") || !strings.Contains(out, "1 differences") {
		t.Errorf("tessera schema check: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	run, err = tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "schema-check-store-e2e", TaskQueue: queue},
		workflows.SchemaCheckName, workflows.SchemaCheckInput{Database: "store"})
	if err != nil {
		t.Fatal(err)
	}
	var report workflows.SchemaCheckResult
	if err := run.Get(ctx, &report); err != nil {
		t.Fatal(err)
	}
	if len(report.Differences) != 1 {
		t.Fatalf("schema check: %+v, want one difference", report)
	}
	if d := report.Differences[0]; d.Table != "public.orders" || d.Shard != "s1" || d.Reference != "s0" || !strings.Contains(d.What, "extra column note text") {
		t.Errorf("difference %+v, want public.orders on s1: extra column note text", d)
	}
}

// regexpLine reports whether some line of text matches the pattern.
func regexpLine(text, pattern string) bool {
	re := regexp.MustCompile(pattern)
	for _, l := range strings.Split(text, "\n") {
		if re.MatchString(l) {
			return true
		}
	}
	return false
}

type connectorFunc func(ctx context.Context, shard, database string) (string, error)

func (f connectorFunc) ConnString(ctx context.Context, shard, database string) (string, error) {
	return f(ctx, shard, database)
}
