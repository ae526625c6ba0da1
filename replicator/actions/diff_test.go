package actions

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/workflows"
)

// TestDiffResumesAfterTheLastChunk stops a VDiff after its first stretch
// of chunks, as a killed worker would, and resumes it from what the
// heartbeat held: it compares only the chunks left (a row lost in a
// chunk compared before is not seen again), and ends with the same
// chunk count as a diff from the start.
func TestDiffResumesAfterTheLastChunk(t *testing.T) {
	ctx := testCtx(t)
	a := &Actions{Conn: createShards(t, "dres", `CREATE TABLE public.customers (customer_id int8 PRIMARY KEY, name text)`, "s1", "t1", "t2"),
		diffChunkRows: 50}
	src := shardConn(t, "dres", "s1")
	mustExec(t, src, `INSERT INTO customers SELECT i, 'customer ' || i FROM generate_series(1, 3000) i`)
	top := parseTopology(t)
	plan, err := planTopology(top, workflows.PlanReshardInput{WorkflowID: "reshard-dres",
		Input: workflows.ReshardInput{Database: "shop", ShardGroup: "data", TargetKeyRanges: splitRanges}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.planTables(ctx, &plan, top); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.CleanupReshard(context.Background(), plan) })
	if _, err := a.CopyTables(ctx, workflows.SourceInput{Plan: plan, Source: "s1"}); err != nil {
		t.Fatal(err)
	}
	report := func(r workflows.DiffTablesResult) replicator.DiffReport {
		var rep replicator.DiffReport
		if raw := r.Reports["public.customers"]; raw != nil {
			if err := json.Unmarshal(raw, &rep); err != nil {
				t.Fatal(err)
			}
		}
		return rep
	}
	full, err := a.diffTables(ctx, plan, workflows.DiffTablesResult{}, func(workflows.DiffTablesResult) {})
	if err != nil || full.Differences != 0 {
		t.Fatalf("full diff %+v, %v", full, err)
	}
	fullChunks := report(full).Chunks

	// The first attempt dies after its first stretch of chunks.
	cctx, kill := context.WithCancel(ctx)
	var beat workflows.DiffTablesResult
	_, err = a.diffTables(cctx, plan, workflows.DiffTablesResult{}, func(r workflows.DiffTablesResult) {
		if rep := report(r); rep.Chunks > 0 && !rep.Done && beat.Reports == nil {
			beat = r
			kill()
		}
	})
	if err == nil || beat.Reports == nil {
		t.Fatalf("the killed diff: %v, heartbeat %+v", err, beat)
	}
	done := report(beat).Chunks
	t.Logf("%d chunks in all; the killed attempt's heartbeat had %d (after key %v)", fullChunks, done, report(beat).After)

	// Lost since: a row in a chunk compared before, one in a chunk not.
	for _, shard := range []string{"t1", "t2"} {
		mustExec(t, shardConn(t, "dres", shard), `DELETE FROM customers WHERE customer_id IN (1, 3000)`)
	}
	resumed, err := a.diffTables(ctx, plan, beat, func(workflows.DiffTablesResult) {})
	if err != nil {
		t.Fatal(err)
	}
	rep := report(resumed)
	reread := rep.Chunks - done
	t.Logf("the resumed attempt compared %d chunks of %d", reread, fullChunks)
	if !rep.Done || rep.Chunks != fullChunks || reread >= fullChunks || reread <= 0 {
		t.Fatalf("resumed report %+v: %d chunks compared again, %d in a full diff", rep, reread, fullChunks)
	}
	if resumed.Differences != 1 || len(rep.Differences) != 1 || rep.Differences[0].Key[0] != "3000" {
		t.Fatalf("resumed diff found %+v", rep.Differences)
	}
	// A diff from the start sees both.
	again, err := a.diffTables(ctx, plan, workflows.DiffTablesResult{}, func(workflows.DiffTablesResult) {})
	if err != nil || again.Differences != 2 {
		t.Fatalf("diff from the start: %+v, %v", again, err)
	}
}
