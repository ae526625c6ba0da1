package workflows

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
)

// diffUpdate sends the VDiff update and keeps its outcome.
func diffUpdate(env *testsuite.TestWorkflowEnvironment, res *DiffTablesResult, out *error) {
	updates++
	env.UpdateWorkflow(VDiffUpdate, "vdiff-"+string(rune('a'+updates%26))+time.Duration(updates).String(), &testsuite.TestUpdateCallback{
		OnReject: func(err error) { *out = err },
		OnAccept: func() {},
		OnComplete: func(v any, err error) {
			*out = err
			if d, ok := v.(DiffTablesResult); ok {
				*res = d
			}
		},
	})
}

func sqlStateOf(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	return ""
}

// The VDiff update is refused while copying, runs in ready_for_cutover
// with the streams stopped (the fake DiffTables fails if one runs) and
// started again, and after the switch diffs the reverse direction.
func TestVDiffUpdateDiffsForwardThenReverse(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20}
	env := newReshardEnv(t, f)
	f.streamsEndAt = []time.Time{env.Now().Add(20*time.Minute + time.Second)}
	var early, ready, switchErr, switched, completeErr error
	var readyRes, switchedRes DiffTablesResult
	var afterReady ReshardProgress
	env.RegisterDelayedCallback(func() { diffUpdate(env, &DiffTablesResult{}, &early) }, time.Second)
	env.RegisterDelayedCallback(func() { diffUpdate(env, &readyRes, &ready) }, 10*time.Minute)
	env.RegisterDelayedCallback(func() {
		afterReady = queryProgress(t, env)
		if d := currentDetails(t, env); !strings.Contains(d, "rows copied: 220 of ~200") {
			t.Errorf("current details %q", d)
		}
	}, 15*time.Minute)
	env.RegisterDelayedCallback(func() { update(env, SwitchTrafficUpdate, &switchErr) }, 20*time.Minute)
	env.RegisterDelayedCallback(func() { diffUpdate(env, &switchedRes, &switched) }, 30*time.Minute)
	env.RegisterDelayedCallback(func() { update(env, CompleteUpdate, &completeErr) }, 40*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if sqlStateOf(early) != "55000" {
		t.Fatalf("VDiff while copying: %v", early)
	}
	if ready != nil || !readyRes.Done || switchErr != nil || switched != nil || !switchedRes.Done || completeErr != nil {
		t.Fatalf("VDiff when ready: %v %+v; SwitchTraffic: %v; VDiff when switched: %v %+v; Complete: %v",
			ready, readyRes, switchErr, switched, switchedRes, completeErr)
	}
	if afterReady.Phase != PhaseReadyForCutover || afterReady.LastDiff == nil || afterReady.RowsEstimated["public.orders"] != 180 {
		t.Fatalf("progress after the VDiff: %+v", afterReady)
	}
	// The catch-up's diff, the update's, and the reverse one.
	if f.called("diff s1,s2") != 2 || f.called("diff t1,t2,t3,t4") != 1 {
		t.Fatalf("calls %v", f.calls)
	}
	// Each diff restarted the streams it stopped: forward twice after
	// the first start, reverse once after the switch's.
	if f.called("stream s") != 6 || f.called("stream t") != 8 {
		t.Fatalf("calls %v", f.calls)
	}
}

// A movement answers a VDiff workflow's request by signal: the result
// when its streams run, else the refusal with its SQLSTATE.
func TestVDiffRequestSignalIsAnswered(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20}
	env := newReshardEnv(t, f)
	var replies []VDiffReply
	env.OnSignalExternalWorkflow(mock.Anything, "vdiff-reshard-store-customer_data", "run-1", VDiffReplySignal, mock.Anything).
		Return(func(ns, id, run, name string, arg any) error {
			replies = append(replies, arg.(VDiffReply))
			return nil
		})
	req := VDiffRequest{WorkflowID: "vdiff-reshard-store-customer_data", RunID: "run-1"}
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(VDiffRequestSignal, req) }, time.Second)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(VDiffRequestSignal, req) }, 10*time.Minute)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(CancelSignal, nil) }, 20*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if len(replies) != 2 {
		t.Fatalf("replies %+v", replies)
	}
	if r := replies[0]; r.Error == "" || r.SQLState != "55000" || r.Result != nil || r.Phase == PhaseReadyForCutover {
		t.Fatalf("reply while copying: %+v", r)
	}
	if r := replies[1]; r.Error != "" || r.Result == nil || !r.Result.Done || r.Phase != PhaseReadyForCutover || r.Reverse {
		t.Fatalf("reply when ready: %+v", r)
	}
	if f.called("diff") != 2 {
		t.Fatalf("calls %v", f.calls)
	}
}

// A refused plan leaves the movement in phase failed, with the reason.
func TestRefusedPlanShowsFailed(t *testing.T) {
	f := &fakeReplicator{planErr: temporal.NewNonRetryableApplicationError("target key ranges overlap", "22023", nil)}
	env := newReshardEnv(t, f)
	env.ExecuteWorkflow(Reshard, reshardIn)
	if sqlStateOf(env.GetWorkflowError()) != "22023" {
		t.Fatalf("error %v", env.GetWorkflowError())
	}
	p := queryProgress(t, env)
	if p.Phase != PhaseFailed || !strings.Contains(p.Error, "target key ranges overlap") {
		t.Fatalf("progress %+v", p)
	}
	if d := currentDetails(t, env); !strings.Contains(d, ": failed") || !strings.Contains(d, "overlap") {
		t.Fatalf("current details %q", d)
	}
}

// A movement cancelled while it runs a VDiff a VDiff workflow asked for
// still answers it, with the failure.
func TestVDiffRequestAnsweredWhenTheMovementIsCancelled(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20, diffBlocks: true}
	env := newReshardEnv(t, f)
	var replies []VDiffReply
	env.OnSignalExternalWorkflow(mock.Anything, "vdiff-1", "", VDiffReplySignal, mock.Anything).
		Return(func(ns, id, run, name string, arg any) error {
			replies = append(replies, arg.(VDiffReply))
			return nil
		})
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(VDiffRequestSignal, VDiffRequest{WorkflowID: "vdiff-1"}) }, 10*time.Minute)
	f.whileDiffBlocks = env.CancelWorkflow
	env.ExecuteWorkflow(Reshard, reshardIn)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Phase != PhaseCancelled || len(replies) != 1 || replies[0].Error == "" || replies[0].Result != nil {
		t.Fatalf("result %+v, replies %+v, calls %v", res, replies, f.calls)
	}
	if f.called("diff") != 2 || f.called("cleanup") != 1 {
		t.Fatalf("calls %v", f.calls)
	}
}
