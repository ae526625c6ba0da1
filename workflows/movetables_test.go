package workflows

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/pgerr"
)

var moveTestPlan = ReshardPlan{
	Key: "mt0011223344556677", Database: "store", ShardGroup: "customer_data", TargetShardGroup: "archive",
	Sources: []string{"s1", "s2"}, Targets: []string{"a1"},
	Tables: []ReshardTable{{Schema: "public", Name: "orders", ShardColumn: "order_id", ReverseShardColumn: "customer_id"}},
}

var moveIn = MoveTablesInput{Database: "store", Tables: []string{"public.orders"}, TargetShardGroup: "archive"}

// registerFakeMoveTables registers MoveTables and its planning activity,
// which answers moveTestPlan, beside Reshard's fake replicator.
func registerFakeMoveTables(env *testsuite.TestWorkflowEnvironment, f *fakeReplicator) {
	env.RegisterWorkflowWithOptions(MoveTables, workflow.RegisterOptions{Name: MoveTablesName})
	env.RegisterActivityWithOptions(func(ctx context.Context, in PlanMoveTablesInput) (ReshardPlan, error) {
		f.record("plan tables")
		if in.WorkflowID == "" || in.Input.TargetShardGroup != "archive" || len(in.Input.Tables) != 1 || in.Input.Resume != nil {
			return ReshardPlan{}, errors.New("bad plan input")
		}
		if in.Input.Source != nil {
			plan := moveTestPlan
			plan.ShardGroup, plan.Sources, plan.ImportSecret = ImportSourceShard, []string{ImportSourceShard}, in.Input.Source.ConnSecret
			return plan, nil
		}
		return moveTestPlan, nil
	}, activity.RegisterOptions{Name: PlanMoveTablesActivity})
}

// TestMoveTablesRunsReshardsLoopOnItsPlan: MoveTables plans with its own
// activity, then copies, streams, diffs, switches and completes with
// Reshard's, on its plan; the reverse streams run from the target group's
// shard and route by the source group's column.
func TestMoveTablesRunsReshardsLoopOnItsPlan(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20}
	env := newReshardEnv(t, f)
	f.streamsEndAt = []time.Time{env.Now().Add(10*time.Minute + time.Second)}
	var switchErr, completeErr error
	env.RegisterDelayedCallback(func() { update(env, SwitchTrafficUpdate, &switchErr) }, 10*time.Minute)
	env.RegisterDelayedCallback(func() {
		if p := queryProgress(t, env); p.Phase != PhaseSwitched {
			t.Errorf("phase after SwitchTraffic: %s", p.Phase)
		}
		update(env, CompleteUpdate, &completeErr)
	}, 20*time.Minute)
	env.ExecuteWorkflow(MoveTables, moveIn)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if switchErr != nil || completeErr != nil {
		t.Fatalf("SwitchTraffic: %v; Complete: %v", switchErr, completeErr)
	}
	if res.Phase != PhaseCompleted || f.called("plan tables") != 1 || f.called("plan") != 1 || f.called("copy") != 2 ||
		f.called("diff") != 1 || f.called("switch") != 1 || f.called("complete") != 1 || f.called("cleanup") != 0 {
		t.Fatalf("result %+v, calls %v", res, f.calls)
	}
	if f.called("stream a1") == 0 {
		t.Fatalf("no reverse stream from a1: %v", f.calls)
	}
	if !strings.Contains(strings.Join(res.Steps, "\n"), "the moved tables are dropped from the sources") {
		t.Fatalf("steps %v", res.Steps)
	}
}

// TestMoveTablesReversedPlan: the reverse of a MoveTables' plan swaps the
// groups and each table's routing column, and reversing twice gives the
// plan back; a Reshard's plan keeps its group and columns.
func TestMoveTablesReversedPlan(t *testing.T) {
	rev := moveTestPlan.Reversed()
	if rev.ShardGroup != "archive" || rev.TargetShardGroup != "customer_data" || rev.Sources[0] != "a1" ||
		rev.Tables[0].ShardColumn != "customer_id" || rev.Tables[0].ReverseShardColumn != "order_id" {
		t.Fatalf("reversed %+v", rev)
	}
	if moveTestPlan.Tables[0].ShardColumn != "order_id" {
		t.Fatal("Reversed changed the plan's own tables")
	}
	if back := rev.Reversed(); back.ShardGroup != "customer_data" || back.Tables[0].ShardColumn != "order_id" {
		t.Fatalf("reversed twice %+v", back)
	}
	if r := testPlan.Reversed(); r.MovesTables() || r.ShardGroup != testPlan.ShardGroup || r.Tables[1].ShardColumn != "customer_id" {
		t.Fatalf("reshard plan reversed %+v", r)
	}
}

// TestMoveTablesContinuesAsNewWithoutPlanningAgain: a resumed run (as a
// long wait continues as new) neither plans nor copies, and a Cancel
// drops what the move made.
func TestMoveTablesContinuesAsNewWithoutPlanningAgain(t *testing.T) {
	f := &fakeReplicator{}
	env := newReshardEnv(t, f)
	in := moveIn
	in.Resume = &ReshardResume{Plan: moveTestPlan, Copied: map[string]int64{"public.orders": 7}, LastDiff: &DiffTablesResult{Done: true}}
	env.RegisterDelayedCallback(func() {
		if p := queryProgress(t, env); p.Phase != PhaseReadyForCutover || p.Copied["public.orders"] != 7 {
			t.Errorf("progress after continuing: %+v", p)
		}
		env.SignalWorkflow(CancelSignal, nil)
	}, 5*time.Minute)
	env.ExecuteWorkflow(MoveTables, in)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Phase != PhaseCancelled || f.called("plan") != 0 || f.called("copy") != 0 || f.called("stream") != 2 || f.called("cleanup") != 1 {
		t.Fatalf("result %+v, calls: %v", res, f.calls)
	}
}

// TestImportRefusesReverseTraffic: an import's traffic never went through
// the routers to the external Postgres, so ReverseTraffic is refused
// (0A000) and Complete still ends it.
func TestImportRefusesReverseTraffic(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20}
	env := newReshardEnv(t, f)
	f.streamsEndAt = []time.Time{env.Now().Add(10*time.Minute + time.Second)}
	var switchErr, readsErr, reverseErr, completeErr error
	env.RegisterDelayedCallback(func() {
		update(env, SwitchTrafficUpdate, &readsErr, TrafficInput{Traffic: TrafficReads})
		update(env, SwitchTrafficUpdate, &switchErr)
	}, 10*time.Minute)
	env.RegisterDelayedCallback(func() { update(env, ReverseTrafficUpdate, &reverseErr) }, 20*time.Minute)
	env.RegisterDelayedCallback(func() { update(env, CompleteUpdate, &completeErr) }, 30*time.Minute)
	in := moveIn
	in.Source = &ExternalSource{ConnSecret: "/etc/tessera/import.dsn"}
	env.ExecuteWorkflow(MoveTables, in)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	var appErr *temporal.ApplicationError
	if !errors.As(reverseErr, &appErr) || appErr.Type() != pgerr.FeatureNotSupported {
		t.Fatalf("ReverseTraffic of an import: %v", reverseErr)
	}
	if !errors.As(readsErr, &appErr) || appErr.Type() != pgerr.FeatureNotSupported {
		t.Fatalf("SwitchTraffic of reads of an import: %v", readsErr)
	}
	if switchErr != nil || completeErr != nil || res.Phase != PhaseCompleted ||
		f.called("stream "+ImportSourceShard) != 2 || !strings.Contains(strings.Join(res.Steps, "\n"), "the external Postgres keeps its tables") {
		t.Fatalf("SwitchTraffic %v, Complete %v, result %+v, calls %v", switchErr, completeErr, res, f.calls)
	}
}

// TestMoveTablesSwitchReadsFirst: a MoveTables switches replica reads
// ahead of its writes, as a Reshard does, with the same activity given
// its plan.
func TestMoveTablesSwitchReadsFirst(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20}
	env := newReshardEnv(t, f)
	f.streamsEndAt = []time.Time{env.Now().Add(15*time.Minute + time.Second)}
	var readsErr, switchErr, completeErr error
	var afterReads ReshardProgress
	env.RegisterDelayedCallback(func() { update(env, SwitchTrafficUpdate, &readsErr, TrafficInput{Traffic: TrafficReads}) }, 10*time.Minute)
	env.RegisterDelayedCallback(func() {
		afterReads = queryProgress(t, env)
		update(env, SwitchTrafficUpdate, &switchErr)
	}, 15*time.Minute)
	env.RegisterDelayedCallback(func() { update(env, CompleteUpdate, &completeErr) }, 20*time.Minute)
	env.ExecuteWorkflow(MoveTables, moveIn)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if readsErr != nil || switchErr != nil || completeErr != nil {
		t.Fatalf("reads %v, writes %v, Complete %v", readsErr, switchErr, completeErr)
	}
	if afterReads.Phase != PhaseReadyForCutover || afterReads.ReadsSwitched == nil {
		t.Fatalf("progress after the reads switch: %+v", afterReads)
	}
	if res.Phase != PhaseCompleted || f.called("reads on") != 1 || f.called("switch") != 1 {
		t.Fatalf("result %+v, calls %v", res, f.calls)
	}
}
