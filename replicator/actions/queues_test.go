package actions

import (
	"context"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
	"github.com/tesseradb/tessera/workflows"
)

// A plan routes a shard to its replicator's queue only while one is
// registered for it; other shards' replicators do not count.
func TestPlanQueuesNameRegisteredReplicators(t *testing.T) {
	ctx := testCtx(t)
	st, err := store.Dial(ctx, etcdembed.Start(t), "queues")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	a := &Actions{Store: st}
	plan := workflows.ReshardPlan{Sources: []string{"s1"}, Targets: []string{"t1", "t2"}}
	if q, err := a.planQueues(ctx, plan); err != nil || q != nil {
		t.Fatalf("without replicators: %v, %v", q, err)
	}
	for _, shard := range []string{"s1", "t2", "elsewhere"} {
		reg, err := st.Register(ctx, store.Record{Kind: store.KindReplicator, ID: "rep-" + shard, ShardUID: shard}, 10*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		defer reg.Close(context.Background())
	}
	q, err := a.planQueues(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	if len(q) != 2 || q["s1"] != "replicator-s1" || q["t2"] != "replicator-t2" {
		t.Fatalf("queues %v, want s1 and t2 on their replicators", q)
	}
}

// A replicator refuses a source other than its shard, before touching
// anything (its Actions have no Connector: a connection would panic).
func TestRegisterSourceRefusesAnotherShard(t *testing.T) {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	(&Actions{}).RegisterSource(env, "s1")
	_, err := env.ExecuteActivity(workflows.CopyTablesActivity, workflows.SourceInput{Source: "s2"})
	if sqlState(err) != pgerr.InternalError {
		t.Fatalf("CopyTables of s2 on s1's replicator: %v", err)
	}
	_, err = env.ExecuteActivity(workflows.StreamChangesActivity, workflows.SourceInput{Source: "s2"})
	if sqlState(err) != pgerr.InternalError {
		t.Fatalf("StreamChanges of s2 on s1's replicator: %v", err)
	}
}
