package actions

import (
	"context"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
	"github.com/tesseradb/tessera/workflows"
)

// TestSourceFailoverIsDetected: on real Postgres and etcd, a running
// stream whose source's term moves fails, within a few of its term
// polls, with workflows.SourceFailoverError naming the shard and both
// terms, and so does a new attempt; with the term unchanged but the slot
// gone from the source (a promoted replica never had it), neither the
// stream nor a retried copy makes a new slot: both fail the same way.
// ResetMovement then undoes the movement (slot, the targets' rows,
// origins and progress) and returns the new term, from which a new copy
// brings every row again.
func TestSourceFailoverIsDetected(t *testing.T) {
	ctx := testCtx(t)
	st, err := store.Dial(ctx, etcdembed.Start(t), "failover")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	setTerm := func(term int64) {
		if _, err := st.UpdateShardState(ctx, "s1", func(s *store.ShardState) error { s.Term, s.Primary = term, "s1-"+string(rune('a'+term)); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	setTerm(1)
	a := &Actions{Store: st, Conn: createShards(t, "fo", `CREATE TABLE public.customers (customer_id int8 PRIMARY KEY, name text)`, "s1", "t1", "t2")}
	src, t1, t2 := shardConn(t, "fo", "s1"), shardConn(t, "fo", "t1"), shardConn(t, "fo", "t2")
	mustExec(t, src, `INSERT INTO customers SELECT i, 'customer ' || i FROM generate_series(1, 300) i`)
	top := parseTopology(t)
	plan, err := planTopology(top, workflows.PlanReshardInput{WorkflowID: "reshard-shop-data",
		Input: workflows.ReshardInput{Database: "shop", ShardGroup: "data", TargetKeyRanges: splitRanges}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.planTables(ctx, &plan, top); err != nil {
		t.Fatal(err)
	}
	if plan.Terms, err = a.shardTerms(ctx, plan.Sources); err != nil || plan.Terms["s1"] != 1 {
		t.Fatalf("terms %v, %v", plan.Terms, err)
	}
	in := workflows.SourceInput{Plan: plan, Source: "s1"}
	if _, err := a.CopyTables(ctx, in); err != nil {
		t.Fatal(err)
	}
	failedOver := func(what string, err error, terms string) {
		t.Helper()
		// The activity's own error, not one wrapping it: Temporal would
		// retry that.
		appErr, ok := err.(*temporal.ApplicationError)
		if !ok || !appErr.NonRetryable() || appErr.Type() != workflows.SourceFailoverError || !strings.Contains(err.Error(), "source shard s1 failed over") ||
			!strings.Contains(err.Error(), terms) || !strings.Contains(err.Error(), "SQLSTATE 55000") {
			t.Fatalf("%s: %v, want a %s error with %q", what, err, workflows.SourceFailoverError, terms)
		}
	}

	stream := runStreamInBackground(t, a, plan, "s1", 0)
	time.Sleep(time.Second) // it runs
	setTerm(2)
	select {
	case err := <-stream.done:
		failedOver("running stream", err, "term 1 when its slot was made, 2 now")
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not notice the failover")
	}
	failedOver("stream started after the failover", a.StreamChanges(ctx, in), "term 1 when its slot was made, 2 now")

	// The term the plan has, but no slot: a promoted replica.
	plan.Terms = map[string]int64{"s1": 2}
	in.Plan = plan
	if err := replicator.DropSlot(ctx, src, plan.Slot("s1")); err != nil {
		t.Fatal(err)
	}
	failedOver("stream without its slot", a.StreamChanges(ctx, in), "does not exist")
	_, err = a.CopyTables(ctx, in)
	failedOver("copy retried without its slot", err, "holds rows copied with it")
	if n := count(t, src, "SELECT count(*) FROM pg_replication_slots"); n != 0 {
		t.Fatalf("%d slots made on the source after the failover", n)
	}

	res, err := a.ResetMovement(ctx, plan)
	if err != nil || res.Terms["s1"] != 2 {
		t.Fatalf("reset: %+v, %v", res, err)
	}
	for _, c := range []struct {
		what string
		n    int64
	}{
		{"customers on t1", count(t, t1, "SELECT count(*) FROM customers")},
		{"customers on t2", count(t, t2, "SELECT count(*) FROM customers")},
		{"progress rows on t1", count(t, t1, "SELECT count(*) FROM _tessera.copy_progress")},
		{"origins on t2", count(t, t2, "SELECT count(*) FROM pg_replication_origin")},
	} {
		if c.n != 0 {
			t.Fatalf("after the reset: %d %s", c.n, c.what)
		}
	}
	plan.Terms = res.Terms
	in.Plan = plan
	if _, err := a.CopyTables(ctx, in); err != nil {
		t.Fatalf("copy after the reset: %v", err)
	}
	if n := count(t, t1, "SELECT count(*) FROM customers") + count(t, t2, "SELECT count(*) FROM customers"); n != 300 {
		t.Fatalf("%d customers on the targets after the new copy", n)
	}
	if err := a.CleanupReshard(context.Background(), plan); err != nil {
		t.Fatal(err)
	}
}
