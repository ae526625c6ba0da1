package actions

import (
	"testing"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/workflows"
)

// TestPlanEstimatesRowsAndTakesTheCopyBatchSize: the plan estimates each
// table's rows (reltuples once analysed, a count before), refuses a batch
// size out of bounds with 22023, and the copy commits batches of the size
// asked for.
func TestPlanEstimatesRowsAndTakesTheCopyBatchSize(t *testing.T) {
	ctx := testCtx(t)
	ddl := `CREATE TABLE public.customers (customer_id int8 PRIMARY KEY, name text);
		CREATE TABLE public.orders (id int8 NOT NULL, customer_id int8 NOT NULL, note text, PRIMARY KEY (customer_id, id))`
	a := &Actions{Conn: createShards(t, "est", ddl, "s1", "t1", "t2")}
	src := shardConn(t, "est", "s1")
	mustExec(t, src, `INSERT INTO customers SELECT i, 'customer ' || i FROM generate_series(1, 500) i`)
	mustExec(t, src, `INSERT INTO orders SELECT i, i % 500 + 1, 'x' FROM generate_series(1, 3000) i`)
	// orders is analysed (reltuples exact on a table this small);
	// customers never is, so it is counted. A row deleted after the
	// ANALYZE shows which was read.
	mustExec(t, src, `ANALYZE orders`)
	mustExec(t, src, `DELETE FROM orders WHERE id = 1`)

	top := parseTopology(t)
	for _, n := range []int{-1, workflows.MaxCopyBatchRows + 1} {
		_, err := planTopology(top, workflows.PlanReshardInput{WorkflowID: "w",
			Input: workflows.ReshardInput{Database: "shop", ShardGroup: "data", TargetKeyRanges: splitRanges, CopyBatchRows: n}})
		if sqlState(err) != pgerr.InvalidParameterValue {
			t.Fatalf("copy_batch_rows %d: %v", n, err)
		}
		_, err = planMove(top, workflows.PlanMoveTablesInput{WorkflowID: "w",
			Input: workflows.MoveTablesInput{Database: "shop", Tables: []string{"orders"}, TargetShardGroup: "main", CopyBatchRows: n}})
		if sqlState(err) != pgerr.InvalidParameterValue {
			t.Fatalf("MoveTables' copy_batch_rows %d: %v", n, err)
		}
	}
	plan, err := planTopology(top, workflows.PlanReshardInput{WorkflowID: "reshard-est",
		Input: workflows.ReshardInput{Database: "shop", ShardGroup: "data", TargetKeyRanges: splitRanges, CopyBatchRows: 100}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.planTables(ctx, &plan, top); err != nil {
		t.Fatal(err)
	}
	if err := a.estimateRows(ctx, &plan); err != nil {
		t.Fatal(err)
	}
	est := plan.RowsEstimated["s1"]
	if est["public.customers"] != 500 || est["public.orders"] != 3000 || plan.EstimatedRows()["public.orders"] != 3000 {
		t.Fatalf("estimates %v", plan.RowsEstimated)
	}

	if plan.CopyBatchRows != 100 {
		t.Fatalf("plan's batch size %d", plan.CopyBatchRows)
	}
	res, err := a.CopyTables(ctx, workflows.SourceInput{Plan: plan, Source: "s1"})
	if err != nil || res.Rows["public.customers"] != 500 {
		t.Fatalf("copy %v, %v", res, err)
	}
	// Every target records every batch: 500 rows in batches of 100.
	c, err := replicator.ReadCopyCounters(ctx, shardConn(t, "est", "t1"), plan.Key, "s1", "public.customers")
	if err != nil || c.Batches < 5 {
		t.Fatalf("customers copied in %d batches (%v), want at least 5 of 100 rows", c.Batches, err)
	}
	if err := a.CleanupReshard(ctx, plan); err != nil {
		t.Fatal(err)
	}
}
