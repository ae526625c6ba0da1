package actions

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/workflows"
)

// splitTopology has shop's orders and customers in group "data" on one
// shard, s1; the tests split it over t1 and t2.
const splitTopology = `{
  "authoritative_shard_group": "main",
  "shard_indexes": {"customer_xx": {"type": "xxhash", "columns": ["customer_id"]}},
  "shard_groups": [
    {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
    {"uid": "data", "default_shard_index": "customer_xx", "key_ranges": [{"shard_uid": "s1"}]}
  ],
  "databases": {"shop": {"default_shard_group": "data"}}
}`

const shopDDL = `
CREATE TABLE public.customers (customer_id int8 PRIMARY KEY, name text);
CREATE TABLE public.orders (id int8 NOT NULL, customer_id int8 NOT NULL, note text, PRIMARY KEY (customer_id, id));
CREATE TABLE public.audit (customer_id int8, at timestamptz, what text)`

var splitRanges = []workflows.KeyRangeInput{{ShardUID: "t1", End: "80"}, {ShardUID: "t2", Start: "80"}}

func parseTopology(t *testing.T) *topo.Topology {
	top, err := topo.Parse([]byte(splitTopology))
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func sqlState(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	return ""
}

func TestPlanRefusesBadInputWithItsSQLState(t *testing.T) {
	top := parseTopology(t)
	for _, c := range []struct {
		name  string
		in    workflows.ReshardInput
		state string
	}{
		{"unknown group", workflows.ReshardInput{Database: "shop", ShardGroup: "nope", TargetKeyRanges: splitRanges}, pgerr.UndefinedObject},
		{"gap", workflows.ReshardInput{Database: "shop", ShardGroup: "data",
			TargetKeyRanges: []workflows.KeyRangeInput{{ShardUID: "t1", End: "80"}, {ShardUID: "t2", Start: "90"}}}, pgerr.InvalidParameterValue},
		{"overlap", workflows.ReshardInput{Database: "shop", ShardGroup: "data",
			TargetKeyRanges: []workflows.KeyRangeInput{{ShardUID: "t1", End: "90"}, {ShardUID: "t2", Start: "80"}}}, pgerr.InvalidParameterValue},
		{"source as target", workflows.ReshardInput{Database: "shop", ShardGroup: "data",
			TargetKeyRanges: []workflows.KeyRangeInput{{ShardUID: "s1", End: "80"}, {ShardUID: "t2", Start: "80"}}}, pgerr.FeatureNotSupported},
		{"authoritative", workflows.ReshardInput{Database: "shop", ShardGroup: "main", TargetKeyRanges: splitRanges}, pgerr.FeatureNotSupported},
	} {
		_, err := planTopology(top, workflows.PlanReshardInput{WorkflowID: "w", Input: c.in})
		if got := sqlState(err); got != c.state {
			t.Errorf("%s: %v (SQLSTATE %q), want SQLSTATE %s", c.name, err, got, c.state)
		}
	}
}

func TestPlanRefusesATableWithoutAKey(t *testing.T) {
	conn := createShards(t, "plankey", shopDDL, "s1")
	a := &Actions{Conn: conn}
	top := parseTopology(t)
	plan, err := planTopology(top, workflows.PlanReshardInput{WorkflowID: "w",
		Input: workflows.ReshardInput{Database: "shop", ShardGroup: "data", TargetKeyRanges: splitRanges}})
	if err != nil {
		t.Fatal(err)
	}
	// audit has neither a primary key nor a unique key: refused, nothing made.
	err = a.planTables(testCtx(t), &plan, top)
	t.Logf("refused: %v", err)
	if sqlState(err) != pgerr.ObjectNotInPrerequisiteState {
		t.Fatalf("plan with a keyless table: %v (%q)", err, sqlState(err))
	}
	src := shardConn(t, "plankey", "s1")
	if n := count(t, src, "SELECT count(*) FROM pg_replication_slots"); n != 0 {
		t.Fatalf("%d slots after a refused plan", n)
	}
}

// TestReshardActivitiesCopyStreamDiffAndCleanUp splits s1 over t1 and t2
// with the activities as the workflow calls them, on real Postgres: copy
// (twice, as a retry would), stream under writes, VDiff clean, VDiff
// finding an injected difference, cleanup leaving nothing behind.
func TestReshardActivitiesCopyStreamDiffAndCleanUp(t *testing.T) {
	ctx := testCtx(t)
	ddl := `CREATE TABLE public.customers (customer_id int8 PRIMARY KEY, name text);
		CREATE TABLE public.orders (id int8 NOT NULL, customer_id int8 NOT NULL, note text, PRIMARY KEY (customer_id, id))`
	a := &Actions{Conn: createShards(t, "split", ddl, "s1", "t1", "t2")}
	src, t1, t2 := shardConn(t, "split", "s1"), shardConn(t, "split", "t1"), shardConn(t, "split", "t2")
	mustExec(t, src, `INSERT INTO customers SELECT i, 'customer ' || i FROM generate_series(1, 500) i`)
	mustExec(t, src, `INSERT INTO orders SELECT i, i % 500 + 1, CASE WHEN i % 7 = 0 THEN NULL ELSE repeat('x', i % 50) END FROM generate_series(1, 3000) i`)

	top := parseTopology(t)
	plan, err := planTopology(top, workflows.PlanReshardInput{WorkflowID: "reshard-shop-data",
		Input: workflows.ReshardInput{Database: "shop", ShardGroup: "data", TargetKeyRanges: splitRanges}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.planTables(ctx, &plan, top); err != nil {
		t.Fatal(err)
	}
	if len(plan.Tables) != 2 || plan.Tables[0].DisplayName() != "public.customers" || plan.Tables[1].ShardColumn != "customer_id" {
		t.Fatalf("tables %+v", plan.Tables)
	}

	in := workflows.SourceInput{Plan: plan, Source: "s1"}
	res, err := a.CopyTables(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if res.Rows["public.orders"] != 3000 || res.Rows["public.customers"] != 500 {
		t.Fatalf("copied %v", res.Rows)
	}
	// A retry finds the slot and the targets' progress: nothing twice.
	if _, err := a.CopyTables(ctx, in); err != nil {
		t.Fatalf("copy again: %v", err)
	}
	total := func(table string) int64 {
		return count(t, t1, "SELECT count(*) FROM "+table) + count(t, t2, "SELECT count(*) FROM "+table)
	}
	if n := total("orders"); n != 3000 {
		t.Fatalf("%d orders on the targets", n)
	}
	if count(t, t1, "SELECT count(*) FROM orders") == 0 || count(t, t2, "SELECT count(*) FROM orders") == 0 {
		t.Fatal("a target got no rows")
	}

	// Writes after the copy reach the targets through the stream.
	mustExec(t, src, `INSERT INTO orders SELECT i, i % 500 + 1, 'late' FROM generate_series(3001, 3200) i`)
	mustExec(t, src, `UPDATE orders SET customer_id = customer_id + 1 WHERE id % 10 = 0`) // moves rows between targets
	mustExec(t, src, `DELETE FROM orders WHERE id % 13 = 0`)
	want := count(t, src, "SELECT count(*) FROM orders")
	sctx, stopStream := context.WithCancel(ctx)
	streamErr := make(chan error, 1)
	go func() { streamErr <- a.StreamChanges(sctx, in) }()
	deadline := time.Now().Add(time.Minute)
	wantLate := count(t, src, "SELECT count(*) FROM orders WHERE note = 'late'")
	late := func() int64 {
		return count(t, t1, "SELECT count(*) FROM orders WHERE note = 'late'") + count(t, t2, "SELECT count(*) FROM orders WHERE note = 'late'")
	}
	for total("orders") != want || late() != wantLate {
		if time.Now().After(deadline) {
			stopStream()
			t.Fatalf("the stream did not catch up: %d orders on the targets, %d on the source (%v)", total("orders"), want, <-streamErr)
		}
		time.Sleep(200 * time.Millisecond)
	}
	lag, err := a.StreamLag(ctx, plan)
	if err != nil || len(lag.Sources) != 1 || lag.Sources[0].ConfirmedLSN == "" {
		t.Fatalf("lag %+v, %v", lag, err)
	}
	stopStream()
	if err := <-streamErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("stream stopped with %v", err)
	}

	// More writes while the streams are stopped: the diff's consistent
	// point applies them before comparing.
	mustExec(t, src, `UPDATE customers SET name = 'renamed' WHERE customer_id % 3 = 0`)
	diff, err := a.DiffTables(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	if !diff.Done || diff.Differences != 0 || len(diff.Reports) != 2 {
		t.Fatalf("diff %+v", diff)
	}

	// A row lost on a target is found.
	var lost int64
	if err := t1.QueryRow(ctx, "DELETE FROM customers WHERE customer_id = (SELECT min(customer_id) FROM customers) RETURNING customer_id").Scan(&lost); err != nil {
		t.Fatal(err)
	}
	diff, err = a.DiffTables(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	if diff.Differences != 1 {
		t.Fatalf("after deleting customer %d on t1: %+v", lost, diff)
	}
	var report replicator.DiffReport
	if err := json.Unmarshal(diff.Reports["public.customers"], &report); err != nil {
		t.Fatal(err)
	}
	if len(report.Differences) != 1 || report.Differences[0].Kind != replicator.DiffMissing {
		t.Fatalf("report %+v", report)
	}

	// A retried DiffTables (here under Temporal's activity test
	// environment, which passes heartbeat details as a retry does) goes
	// on from its last heartbeat: a table whose report there is done is
	// not compared again, so the lost customer is not found this time.
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.RegisterActivityWithOptions(a.DiffTables, activity.RegisterOptions{Name: workflows.DiffTablesActivity})
	earlier, err := json.Marshal(replicator.DiffReport{Table: "public.customers", Done: true, SourceRows: 424242})
	if err != nil {
		t.Fatal(err)
	}
	env.SetHeartbeatDetails(workflows.DiffTablesResult{Reports: map[string]json.RawMessage{"public.customers": earlier}})
	v, err := env.ExecuteActivity(workflows.DiffTablesActivity, plan)
	if err != nil {
		t.Fatal(err)
	}
	var resumed workflows.DiffTablesResult
	if err := v.Get(&resumed); err != nil {
		t.Fatal(err)
	}
	report = replicator.DiffReport{}
	if err := json.Unmarshal(resumed.Reports["public.customers"], &report); err != nil {
		t.Fatal(err)
	}
	if resumed.Differences != 0 || report.SourceRows != 424242 || !resumed.Done {
		t.Fatalf("resumed diff %+v, customers %+v", resumed, report)
	}

	// Cleanup drops everything, and again finds nothing to do.
	for i := 0; i < 2; i++ {
		if err := a.CleanupReshard(ctx, plan); err != nil {
			t.Fatalf("cleanup %d: %v", i, err)
		}
	}
	if n := count(t, src, "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1 || '%'", plan.Key); n != 0 {
		t.Fatalf("%d slots left", n)
	}
	if n := count(t, src, "SELECT count(*) FROM pg_publication WHERE pubname = $1", plan.Publication()); n != 0 {
		t.Fatal("publication left")
	}
	for _, c := range []*pgx.Conn{t1, t2} {
		if n := count(t, c, "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'tessera_' || $1 || '%'", plan.Key); n != 0 {
			t.Fatalf("%d origins left", n)
		}
		if n := count(t, c, "SELECT count(*) FROM _tessera.copy_progress WHERE workflow = $1", plan.Key); n != 0 {
			t.Fatalf("%d progress rows left", n)
		}
	}
}
