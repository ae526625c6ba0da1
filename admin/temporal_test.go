package admin

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
	"github.com/tesseradb/tessera/workflows"
)

// gated records the starts, as recorder does, and tells which operations
// run as the Temporal starter does, from etcd's operation records, with
// runs' liveness (Temporal's describe) given by the test.
type gated struct {
	*recorder
	busy temporalStarter
}

func (g gated) Busy(ctx context.Context, shard string) ([]string, error) {
	return g.busy.Busy(ctx, shard)
}

// TestScheduledSwitchoverBlocksRejoinAndFailover: a switchover that runs
// under an id of its own, as each run of a Temporal schedule does
// (switchover-<shard>-<time>), keeps the admin from starting a Rejoin or
// a Failover on its shard. Looking for the fixed id switchover-<shard>
// missed it: the admin rejoined the old primary while the switchover was
// rewinding it. Once the run is over, its stale record is removed and
// the admin starts again.
func TestScheduledSwitchoverBlocksRejoinAndFailover(t *testing.T) {
	st := dialStore(t, etcdembed.Start(t))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	scheduled := store.Operation{Shard: "s1", Kind: workflows.OpSwitchover,
		WorkflowID: workflows.SwitchoverID("s1") + "-2026-12-06T02:00:00Z", RunID: "run-1", Since: time.Now()}
	if err := st.BeginOperation(ctx, scheduled); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	live := map[string]bool{scheduled.WorkflowID + "/" + scheduled.RunID: true}
	starter := gated{recorder: newRecorder(), busy: temporalStarter{st: st,
		running: func(_ context.Context, id, runID string) (bool, error) {
			mu.Lock()
			defer mu.Unlock()
			return live[id+"/"+runID], nil
		}}}
	a, err := New(Config{Store: st, Secret: secret, Starter: starter})
	if err != nil {
		t.Fatal(err)
	}
	a.start(ctx, Action{Kind: ActRejoin, Shard: "s1", Instance: "s1-a"})
	a.start(ctx, Action{Kind: ActFailover, Shard: "s1"})
	a.start(ctx, Action{Kind: ActRepair, Shard: "s1"})
	if got := starter.actions(); len(got) != 0 {
		t.Fatalf("started %+v while a scheduled switchover runs", got)
	}
	// Another shard is not held up.
	a.start(ctx, Action{Kind: ActRejoin, Shard: "s2", Instance: "s2-a"})
	if got := starter.actions(); len(got) != 1 || got[0].Shard != "s2" {
		t.Fatalf("started %+v; want the rejoin on s2", got)
	}

	// The run ended without removing its record (terminated, say).
	mu.Lock()
	live[scheduled.WorkflowID+"/"+scheduled.RunID] = false
	mu.Unlock()
	a.start(ctx, Action{Kind: ActRejoin, Shard: "s1", Instance: "s1-a"})
	if got := starter.actions(); len(got) != 2 || got[1].Kind != ActRejoin || got[1].Shard != "s1" {
		t.Fatalf("started %+v; want the rejoin on s1 once the switchover is over", got)
	}
	if ops, err := st.ListOperations(ctx, "s1"); err != nil || len(ops) != 0 {
		t.Errorf("operation records left: %+v, %v", ops, err)
	}
}
