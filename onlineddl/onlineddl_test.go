package onlineddl

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/ddl"
	"github.com/tesseradb/tessera/workflows"
)

const ordersDDL = `CREATE TABLE orders (id bigint PRIMARY KEY, name varchar(20), email text,
	CONSTRAINT email_nn CHECK (email IS NOT NULL));
	INSERT INTO orders SELECT g, 'n' || g, 'e' || g FROM generate_series(1, 100) g`

func plan(t *testing.T, a *Activities, sql string, shards ...string) (workflows.OnlineDDLPlan, error) {
	t.Helper()
	return a.PlanOnlineDDL(testCtx(t), workflows.PlanOnlineDDLInput{WorkflowID: "w",
		Input: workflows.OnlineDDLInput{Database: "pl", SQL: sql, Shards: shards}})
}

func TestPlanOnlineDDL(t *testing.T) {
	a := newActivities(t, "pl", ordersDDL+`; CREATE INDEX orders_name ON orders (name)`)
	// s2 lacks a table the others hold.
	for _, s := range []string{"s0", "s1"} {
		mustExec(t, shardConn(t, "pl", s), "CREATE TABLE notes (id int)")
	}
	for _, tc := range []struct {
		sql    string
		path   string
		table  string
		shards []string
	}{
		{"ALTER TABLE orders ADD COLUMN qty int NOT NULL DEFAULT 0", workflows.PathDirect, "orders", testShards},
		// The catalog proves what the statement alone cannot.
		{"ALTER TABLE orders ALTER COLUMN name TYPE varchar(40)", workflows.PathDirect, "orders", testShards},
		{"ALTER TABLE orders ALTER COLUMN email SET NOT NULL", workflows.PathDirect, "orders", testShards},
		{"ALTER TABLE orders ALTER COLUMN name TYPE varchar(10)", workflows.PathShadow, "orders", testShards},
		{"ALTER TABLE orders ALTER COLUMN name SET NOT NULL", workflows.PathShadow, "orders", testShards},
		{"DROP INDEX CONCURRENTLY orders_name", workflows.PathDirect, "orders", testShards},
		{"ALTER TABLE notes ADD COLUMN x int", workflows.PathDirect, "notes", []string{"s0", "s1"}},
		{"DROP TABLE orders", workflows.PathRefused, "", nil},
	} {
		p, err := plan(t, a, tc.sql)
		if err != nil {
			t.Errorf("%s: %v", tc.sql, err)
			continue
		}
		if p.Path != tc.path || p.Table != tc.table || !slices.Equal(p.Shards, tc.shards) || p.Reason == "" {
			t.Errorf("%s: plan %+v, want %s on %s, shards %v", tc.sql, p, tc.path, tc.table, tc.shards)
		}
		if p.Table != "" && p.Schema != "public" {
			t.Errorf("%s: schema %q, want public", tc.sql, p.Schema)
		}
	}
	for _, tc := range []struct {
		sql    string
		shards []string
		code   string
	}{
		{"ALTER TABLE nowhere ADD COLUMN x int", nil, "42P01"},
		{"ALTER TABLE notes ADD COLUMN x int", []string{"s1", "s2"}, "42P01"},
		{"ALTER TABLE orders ADD COLUMN", nil, "42601"},
		{"ALTER TABLE orders ADD COLUMN x int", []string{"s9"}, "42704"},
	} {
		_, err := plan(t, a, tc.sql, tc.shards...)
		var appErr *temporal.ApplicationError
		if !errors.As(err, &appErr) || appErr.Type() != tc.code || !appErr.NonRetryable() {
			t.Errorf("%s on %v: %v, want a final %s", tc.sql, tc.shards, err, tc.code)
		}
	}
}

func apply(t *testing.T, a *Activities, id, shard, sql string) (workflows.ApplyDDLResult, error) {
	t.Helper()
	p, err := plan(t, a, sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return a.ApplyDDL(testCtx(t), workflows.ApplyDDLInput{MigrationID: id, Database: "pl", Shard: shard, SQL: sql, Plan: p, LockTimeoutMillis: 200})
}

func columns(t *testing.T, conn *pgx.Conn, table string) []string {
	t.Helper()
	rows, err := conn.Query(testCtx(t), `SELECT attname FROM pg_attribute WHERE attrelid = $1::regclass AND attnum > 0 AND NOT attisdropped ORDER BY attnum`, table)
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return names
}

func TestApplyDDLRetriesALockAndRunsOnce(t *testing.T) {
	a := newActivities(t, "pl", ordersDDL)
	const sql = "ALTER TABLE orders ADD COLUMN qty int NOT NULL DEFAULT 0"
	// A transaction holding a conflicting lock: the attempt gives up
	// after lock_timeout, with a retryable 55P03.
	holder := shardConn(t, "pl", "s1")
	tx, err := holder.Begin(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(testCtx(t), "LOCK TABLE orders IN ACCESS SHARE MODE"); err != nil {
		t.Fatal(err)
	}
	// Routers hear of a change made, not of an attempt that failed.
	changes, err := a.Store.WatchSchemaChanges(testCtx(t))
	if err != nil {
		t.Fatal(err)
	}
	<-changes
	start := time.Now()
	_, err = apply(t, a, "m1", "s1", sql)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != "55P03" || appErr.NonRetryable() {
		t.Fatalf("with the lock held: %v, want a retryable 55P03", err)
	}
	if waited := time.Since(start); waited > 5*time.Second {
		t.Errorf("the attempt waited %s for its lock, lock_timeout is 200 ms", waited)
	}
	tx.Rollback(testCtx(t))
	conn := shardConn(t, "pl", "s1")
	if cols := columns(t, conn, "orders"); slices.Contains(cols, "qty") {
		t.Fatalf("columns %v after the failed attempt", cols)
	}
	select {
	case c := <-changes:
		t.Fatalf("a failed attempt announced a schema change: %+v", c)
	case <-time.After(200 * time.Millisecond):
	}
	res, err := apply(t, a, "m1", "s1", sql)
	if err != nil || res.AlreadyApplied {
		t.Fatalf("after the lock's release: %+v, %v", res, err)
	}
	select {
	case c := <-changes:
		if len(c) != 1 || c[0].Database != "pl" || c[0].By != "m1" {
			t.Fatalf("announced %+v, want the change of pl by m1", c)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the change made was not announced to the routers")
	}
	// The same migration again: done already, nothing run.
	res, err = apply(t, a, "m1", "s1", sql)
	if err != nil || !res.AlreadyApplied {
		t.Fatalf("a retry of a done migration: %+v, %v; want already applied", res, err)
	}
	if cols := columns(t, conn, "orders"); !slices.Equal(cols, []string{"id", "name", "email", "qty"}) {
		t.Errorf("columns %v", cols)
	}
	// Another migration with the same statement is refused for good,
	// by Postgres: the column exists.
	_, err = apply(t, a, "m2", "s1", sql)
	if !errors.As(err, &appErr) || appErr.Type() != "42701" || !appErr.NonRetryable() {
		t.Errorf("a second migration adding the column: %v, want a final 42701", err)
	}
}

func TestApplyDDLCreateIndexConcurrentlyDropsAnInvalidIndex(t *testing.T) {
	a := newActivities(t, "pl", ordersDDL+`; INSERT INTO orders VALUES (1000, 'n1', 'x')`)
	const sql = "CREATE UNIQUE INDEX CONCURRENTLY orders_name_u ON orders (name)"
	conn := shardConn(t, "pl", "s2")
	index := func() (exists, valid bool) {
		t.Helper()
		err := conn.QueryRow(testCtx(t), `SELECT to_regclass('orders_name_u') IS NOT NULL,
			coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass('orders_name_u')), false)`).Scan(&exists, &valid)
		if err != nil {
			t.Fatal(err)
		}
		return exists, valid
	}
	// A duplicate name: the build fails for good, and the INVALID index
	// it leaves is dropped.
	_, err := apply(t, a, "m1", "s2", sql)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != "23505" || !appErr.NonRetryable() {
		t.Fatalf("a unique index over duplicates: %v, want a final 23505", err)
	}
	if exists, _ := index(); exists {
		t.Error("the failed build's INVALID index was left behind")
	}
	// An INVALID index a build interrupted elsewhere left (made here by
	// the same failing build, run directly): the next attempt drops it.
	if _, err := conn.Exec(testCtx(t), sql); err == nil {
		t.Fatal("the duplicate build succeeded")
	}
	if exists, valid := index(); !exists || valid {
		t.Fatalf("no INVALID index to start from (exists %v, valid %v)", exists, valid)
	}
	mustExec(t, conn, "DELETE FROM orders WHERE id = 1000")
	res, err := apply(t, a, "m1", "s2", sql)
	if err != nil || !res.DroppedInvalidIndex {
		t.Fatalf("%+v, %v: want the INVALID index dropped and the build done", res, err)
	}
	if exists, valid := index(); !exists || !valid {
		t.Errorf("after the build: exists %v, valid %v", exists, valid)
	}
	res, err = apply(t, a, "m1", "s2", sql)
	if err != nil || !res.AlreadyApplied {
		t.Errorf("a retry of a done build: %+v, %v; want already applied", res, err)
	}
	// DROP INDEX CONCURRENTLY, applied twice from one plan (a retry's):
	// the second finds the index gone.
	const drop = "DROP INDEX CONCURRENTLY orders_name_u"
	p, err := plan(t, a, drop)
	if err != nil {
		t.Fatal(err)
	}
	for i, want := range []bool{false, true} {
		res, err := a.ApplyDDL(testCtx(t), workflows.ApplyDDLInput{MigrationID: "m2", Database: "pl", Shard: "s2", SQL: drop, Plan: p, LockTimeoutMillis: 200})
		if err != nil || res.AlreadyApplied != want {
			t.Fatalf("drop attempt %d: %+v, %v; want already applied %v", i+1, res, err, want)
		}
	}
	if exists, _ := index(); exists {
		t.Error("the index is still there after DROP INDEX CONCURRENTLY")
	}
}

func TestCheckSchemaNamesTheTableTheShardAndTheDifference(t *testing.T) {
	a := newActivities(t, "pl", ordersDDL)
	check := func() workflows.SchemaCheckResult {
		t.Helper()
		res, err := a.CheckSchema(testCtx(t), workflows.SchemaCheckInput{Database: "pl"})
		if err != nil {
			t.Fatal(err)
		}
		return res
	}
	if res := check(); len(res.Differences) != 0 || res.Tables != 1 || !slices.Equal(res.Shards, testShards) {
		t.Fatalf("identical shards: %+v", res)
	}
	// The marker table ApplyDDL creates is not compared.
	if _, err := apply(t, a, "m1", "s0", "ALTER TABLE orders ALTER COLUMN name SET DEFAULT 'x'"); err != nil {
		t.Fatal(err)
	}
	mustExec(t, shardConn(t, "pl", "s2"), "ALTER TABLE orders ALTER COLUMN name SET DEFAULT 'x'")
	mustExec(t, shardConn(t, "pl", "s2"), "ALTER TABLE orders ADD COLUMN qty bigint")
	res := check()
	var found []string
	for _, d := range res.Differences {
		found = append(found, ddl.Difference(d).String())
	}
	want := []string{
		// s1 lacks the default s0 has.
		`public.orders on s1: column name is character varying(20), character varying(20) DEFAULT 'x'::character varying on s0`,
		`public.orders on s2: extra column qty bigint (not on s0)`,
	}
	if !slices.Equal(found, want) {
		t.Errorf("differences:\n%s\nwant:\n%s", strings.Join(found, "\n"), strings.Join(want, "\n"))
	}
}
