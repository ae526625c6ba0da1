package workflows

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/pgerr"
)

// fakeShadow stands in for the shadow path's activities (tested on real
// Postgres in package onlineddl): each shard's shadow state moves as the
// real one does, and refuses a step out of order.
type fakeShadow struct {
	mu    sync.Mutex
	state map[string]string
	// swapFails, revertFails: that many swap or revert attempts on a
	// shard fail (a lock timeout).
	swapFails, revertFails map[string]int
	// copyWait, when set, holds every copy until closed or cancelled.
	copyWait chan struct{}
	streams  map[string]int // reverse streams started per shard
	calls    []string
	// ids are the migration ids the steps were given.
	ids map[string]bool
}

// register registers the activities on env; shards keep the state an
// earlier environment left (a run continued as new).
func (f *fakeShadow) register(env *testsuite.TestWorkflowEnvironment) {
	if f.state == nil {
		f.state, f.streams, f.ids = map[string]string{}, map[string]int{}, map[string]bool{}
	}
	step := func(name string, from []string, to string, hook func(ctx context.Context, in ShadowInput) error) {
		env.RegisterActivityWithOptions(func(ctx context.Context, in ShadowInput) (ShadowResult, error) {
			if hook != nil {
				if err := hook(ctx, in); err != nil {
					return ShadowResult{}, err
				}
			}
			f.mu.Lock()
			defer f.mu.Unlock()
			f.calls = append(f.calls, name+" "+in.Shard)
			f.ids[in.MigrationID] = true
			if in.MigrationID == "" || in.Plan.Table != "orders" || in.LockTimeoutMillis != 1000 {
				return ShadowResult{}, temporal.NewNonRetryableApplicationError("bad input", pgerr.InternalError, nil)
			}
			if f.state[in.Shard] == to {
				return ShadowResult{State: to, AlreadyDone: true}, nil
			}
			if !slices.Contains(from, f.state[in.Shard]) {
				return ShadowResult{}, temporal.NewNonRetryableApplicationError(name+" from state "+f.state[in.Shard], pgerr.ObjectNotInPrerequisiteState, nil)
			}
			if fails := map[string]map[string]int{SwapShadowActivity: f.swapFails, RevertShadowActivity: f.revertFails}[name]; fails[in.Shard] > 0 {
				fails[in.Shard]--
				return ShadowResult{}, temporal.NewApplicationError("canceling statement due to lock timeout", "55P03")
			}
			f.state[in.Shard] = to
			if to == ShadowCancelled {
				delete(f.state, in.Shard) // nothing is left
			}
			return ShadowResult{State: to, Rows: 1000, LockMillis: 12}, nil
		}, activity.RegisterOptions{Name: name})
	}
	step(PrepareShadowActivity, []string{""}, ShadowPrepared, nil)
	step(CopyShadowActivity, []string{ShadowPrepared}, ShadowCopied, func(ctx context.Context, _ ShadowInput) error {
		if f.copyWait == nil {
			return nil
		}
		select {
		case <-f.copyWait:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	})
	step(SwapShadowActivity, []string{ShadowCopied}, ShadowSwapped, nil)
	step(RevertShadowActivity, []string{ShadowSwapped}, ShadowReverted, nil)
	step(CompleteShadowActivity, []string{ShadowSwapped}, ShadowCompleted, nil)
	step(CancelShadowActivity, []string{"", ShadowPrepared, ShadowCopied}, ShadowCancelled, nil)
	env.RegisterActivityWithOptions(func(ctx context.Context, in ShadowInput) error {
		f.mu.Lock()
		f.streams[in.Shard]++
		ok := f.state[in.Shard] == ShadowSwapped
		f.mu.Unlock()
		if !ok {
			return temporal.NewNonRetryableApplicationError("no swapped table", pgerr.ObjectNotInPrerequisiteState, nil)
		}
		// The real one runs until cancelled; ending at once lets the test
		// clock move on to the update.
		return nil
	}, activity.RegisterOptions{Name: StreamShadowActivity})
}

var shadowPlan = OnlineDDLPlan{Path: PathShadow, Reason: "ALTER COLUMN id TYPE bigint rewrites the table",
	Execution: "transaction", Schema: "public", Table: "orders", Shards: []string{"s0", "s1", "s2"}}

var shadowIn = OnlineDDLInput{Database: "store", SQL: "ALTER TABLE orders ALTER COLUMN id TYPE bigint"}

func newShadowEnv(t *testing.T, f *fakeShadow) *testsuite.TestWorkflowEnvironment {
	env := newOnlineDDLEnv(t, &fakeDDLCluster{plan: shadowPlan})
	f.register(env)
	return env
}

func TestOnlineDDLShadowPathRetriesASwapAndEndsWithEveryShardOnTheNewSchema(t *testing.T) {
	f := &fakeShadow{swapFails: map[string]int{"s1": 2}}
	env := newShadowEnv(t, f)
	env.ExecuteWorkflow(OnlineDDL, shadowIn)
	var res OnlineDDLResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Phase != PhaseDone {
		t.Errorf("phase %s", res.Phase)
	}
	for _, s := range shadowPlan.Shards {
		if f.state[s] != ShadowCompleted {
			t.Errorf("shard %s: %s, want completed", s, f.state[s])
		}
	}
	if s1 := res.Shards[1]; s1.Attempts != 3+1+1+1 || s1.Shadow != ShadowCompleted || s1.Millis != 12 {
		// prepare, copy, three swaps, complete: attempts count every step's.
		t.Errorf("s1: %+v", s1)
	}
	// No shard swapped before every shard had its copy.
	firstSwap := slices.IndexFunc(f.calls, func(c string) bool { return strings.HasPrefix(c, SwapShadowActivity) })
	for _, c := range f.calls[firstSwap:] {
		if strings.HasPrefix(c, CopyShadowActivity) {
			t.Errorf("calls %v: a copy after a swap", f.calls)
		}
	}
	if res.SchemaCheck == nil {
		t.Error("no schema check")
	}
}

func TestOnlineDDLShadowPathCancelledBeforeTheSwapLeavesNothing(t *testing.T) {
	f := &fakeShadow{copyWait: make(chan struct{})}
	env := newShadowEnv(t, f)
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(OnlineDDLCancelUpdate, "cancel-1", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { t.Errorf("cancel during the copy refused: %v", err) },
			OnAccept:   func() {},
			OnComplete: func(any, error) {},
		})
	}, time.Second)
	env.ExecuteWorkflow(OnlineDDL, shadowIn)
	err := env.GetWorkflowError()
	var canceled *temporal.CanceledError
	if !errors.As(err, &canceled) {
		t.Fatalf("error %v, want cancelled", err)
	}
	if len(f.state) != 0 {
		t.Errorf("left on the shards: %v", f.state)
	}
	for _, c := range f.calls {
		if strings.HasPrefix(c, SwapShadowActivity) {
			t.Errorf("calls %v: a swap after the cancel", f.calls)
		}
	}
}

func TestOnlineDDLShadowPathRevertAfterTheSwap(t *testing.T) {
	f := &fakeShadow{}
	env := newShadowEnv(t, f)
	in := shadowIn
	in.HoldForRevert = true
	var during OnlineDDLProgress
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(OnlineDDLProgressQuery)
		if err == nil {
			err = v.Get(&during)
		}
		if err != nil {
			t.Error(err)
		}
		env.UpdateWorkflow(OnlineDDLCancelUpdate, "cancel-1", &testsuite.TestUpdateCallback{
			OnReject:   func(error) {},
			OnAccept:   func() { t.Error("a cancel was accepted after the swap") },
			OnComplete: func(any, error) {},
		})
		env.UpdateWorkflow(OnlineDDLRevertUpdate, "revert-1", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { t.Errorf("revert refused: %v", err) },
			OnAccept:   func() {},
			OnComplete: func(any, error) {},
		})
	}, time.Minute)
	env.ExecuteWorkflow(OnlineDDL, in)
	var res OnlineDDLResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if during.Phase != PhaseSwapped {
		t.Errorf("phase before the revert: %s, want swapped", during.Phase)
	}
	if res.Phase != PhaseReverted {
		t.Errorf("phase %s, want reverted", res.Phase)
	}
	for _, s := range shadowPlan.Shards {
		if f.state[s] != ShadowReverted {
			t.Errorf("shard %s: %s, want reverted", s, f.state[s])
		}
		if f.streams[s] != 1 {
			t.Errorf("shard %s: %d reverse streams, want 1", s, f.streams[s])
		}
	}
}

// continuedAsNew returns the input a run ended with continuing as new.
func continuedAsNew(t *testing.T, env *testsuite.TestWorkflowEnvironment) OnlineDDLInput {
	t.Helper()
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("error %v, want a continue-as-new", err)
	}
	var next OnlineDDLInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	if next.Resume == nil || next.Resume.MigrationID == "" || next.Resume.Plan.Path != PathShadow || len(next.Resume.Shards) != 3 {
		t.Fatalf("resume %+v", next.Resume)
	}
	return next
}

func TestOnlineDDLShadowPathContinuesAsNewWhileASwapIsRetried(t *testing.T) {
	f := &fakeShadow{swapFails: map[string]int{"s1": 12}}
	env := newShadowEnv(t, f)
	// A few swap attempts on s1 later, the history is long.
	env.RegisterDelayedCallback(func() { env.SetCurrentHistoryLength(ddlHistoryLimit + 1) }, 10*time.Second)
	env.ExecuteWorkflow(OnlineDDL, shadowIn)
	next := continuedAsNew(t, env)
	r := next.Resume
	if r.ShadowStage != stageSwap {
		t.Errorf("stage %q, want swap", r.ShadowStage)
	}
	s0, s1, s2 := r.Shards[0], r.Shards[1], r.Shards[2]
	if s0.Shadow != ShadowSwapped || s2.Shadow != ShadowSwapped || s1.Shadow != ShadowCopied || s1.State != ShardPending || s1.Attempts < 4 {
		t.Fatalf("shards carried over: %+v", r.Shards)
	}
	if f.state["s1"] != ShadowCopied {
		t.Fatalf("s1 is %s before the next run", f.state["s1"])
	}
	f.calls = nil
	env = newShadowEnv(t, f)
	env.ExecuteWorkflow(OnlineDDL, next)
	var res OnlineDDLResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Phase != PhaseDone || res.Shards[1].Shadow != ShadowCompleted || res.Shards[1].Attempts != 2+13+1 {
		// prepare, copy, 13 swaps (12 failed), complete.
		t.Errorf("after continuing: %+v", res.OnlineDDLProgress)
	}
	for _, s := range shadowPlan.Shards {
		if f.state[s] != ShadowCompleted {
			t.Errorf("shard %s: %s, want completed", s, f.state[s])
		}
	}
	for _, c := range f.calls {
		if strings.HasPrefix(c, PrepareShadowActivity) || strings.HasPrefix(c, CopyShadowActivity) || c == SwapShadowActivity+" s0" || c == SwapShadowActivity+" s2" {
			t.Errorf("calls %v: the continued run ran a step a shard had done", f.calls)
		}
	}
	if len(f.ids) != 1 || !f.ids[r.MigrationID] {
		t.Errorf("migration ids %v, want the first run's %s throughout", f.ids, r.MigrationID)
	}
}

func TestOnlineDDLShadowPathHeldForRevertContinuesAsNewAndRevertsAfter(t *testing.T) {
	f := &fakeShadow{}
	env := newShadowEnv(t, f)
	in := shadowIn
	in.HoldForRevert = true
	env.RegisterDelayedCallback(func() {
		env.SetContinueAsNewSuggested(true)
		// Any workflow task looks at the history: a refused cancel's.
		env.UpdateWorkflow(OnlineDDLCancelUpdate, "cancel-1", &testsuite.TestUpdateCallback{
			OnReject:   func(error) {},
			OnAccept:   func() { t.Error("a cancel was accepted after the swap") },
			OnComplete: func(any, error) {},
		})
	}, time.Hour)
	env.ExecuteWorkflow(OnlineDDL, in)
	next := continuedAsNew(t, env)
	if next.Resume.ShadowStage != stageHold || !next.HoldForRevert {
		t.Fatalf("continued with %+v", next)
	}
	for _, st := range next.Resume.Shards {
		if st.Shadow != ShadowSwapped {
			t.Fatalf("shards carried over: %+v", next.Resume.Shards)
		}
	}
	f.calls = nil
	env = newShadowEnv(t, f)
	var during OnlineDDLProgress
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(OnlineDDLProgressQuery)
		if err == nil {
			err = v.Get(&during)
		}
		if err != nil {
			t.Error(err)
		}
		env.UpdateWorkflow(OnlineDDLRevertUpdate, "revert-1", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { t.Errorf("revert refused: %v", err) },
			OnAccept:   func() {},
			OnComplete: func(any, error) {},
		})
	}, time.Hour)
	env.ExecuteWorkflow(OnlineDDL, next)
	var res OnlineDDLResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if during.Phase != PhaseSwapped || res.Phase != PhaseReverted {
		t.Errorf("phase %s while held, %s at the end; want swapped, reverted", during.Phase, res.Phase)
	}
	for _, s := range shadowPlan.Shards {
		if f.state[s] != ShadowReverted || f.streams[s] != 2 {
			t.Errorf("shard %s: %s after %d reverse streams, want reverted after 2 (one per run)", s, f.state[s], f.streams[s])
		}
	}
	for _, c := range f.calls {
		if strings.HasPrefix(c, SwapShadowActivity) || strings.HasPrefix(c, CopyShadowActivity) {
			t.Errorf("calls %v: the continued run swapped again", f.calls)
		}
	}
}

// An update accepted as the history grows long is the migration's
// choice, not lost to a continue-as-new.
func TestOnlineDDLShadowPathKeepsACompleteAcceptedAsItWouldContinueAsNew(t *testing.T) {
	f := &fakeShadow{}
	env := newShadowEnv(t, f)
	in := shadowIn
	in.HoldForRevert = true
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(OnlineDDLCompleteUpdate, "complete-1", &testsuite.TestUpdateCallback{
			OnReject: func(err error) { t.Errorf("complete refused: %v", err) },
			// In the workflow task that runs the handler.
			OnAccept:   func() { env.SetCurrentHistoryLength(ddlHistoryLimit + 1) },
			OnComplete: func(any, error) {},
		})
	}, time.Hour)
	env.ExecuteWorkflow(OnlineDDL, in)
	var res OnlineDDLResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Phase != PhaseDone {
		t.Errorf("phase %s, want done", res.Phase)
	}
	for _, s := range shadowPlan.Shards {
		if f.state[s] != ShadowCompleted {
			t.Errorf("shard %s: %s, want completed", s, f.state[s])
		}
	}
}

// A run whose history predates continuing as new on the shadow path
// retries as it did, however long its history.
func TestOnlineDDLShadowPathOlderRunDoesNotContinueAsNew(t *testing.T) {
	f := &fakeShadow{swapFails: map[string]int{"s1": 8}}
	env := newShadowEnv(t, f)
	env.OnGetVersion(shadowContinueVersion, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.RegisterDelayedCallback(func() { env.SetCurrentHistoryLength(ddlHistoryLimit + 1) }, 5*time.Second)
	env.ExecuteWorkflow(OnlineDDL, shadowIn)
	var res OnlineDDLResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatalf("%v (an older run must not continue as new)", err)
	}
	if res.Phase != PhaseDone || res.Shards[1].Attempts != 2+9+1 {
		t.Errorf("result %+v", res.OnlineDDLProgress)
	}
}

// A run that continued as new while reverting still refuses Complete.
func TestOnlineDDLShadowPathContinuedWhileRevertingRefusesComplete(t *testing.T) {
	f := &fakeShadow{revertFails: map[string]int{"s1": 3},
		state: map[string]string{}, streams: map[string]int{}, ids: map[string]bool{}}
	in := shadowIn
	in.HoldForRevert = true
	in.Resume = &OnlineDDLResume{MigrationID: "onlineddl-x/run-1", Plan: shadowPlan, ShadowStage: stageRevert}
	for _, s := range shadowPlan.Shards {
		f.state[s] = ShadowSwapped
		in.Resume.Shards = append(in.Resume.Shards, ShardDDLState{Shard: s, State: ShardDone, Shadow: ShadowSwapped})
	}
	env := newShadowEnv(t, f)
	var completeErr error
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(OnlineDDLCompleteUpdate, "complete-1", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { completeErr = err },
			OnAccept:   func() {},
			OnComplete: func(_ any, err error) { completeErr = err },
		})
	}, 500*time.Millisecond)
	env.ExecuteWorkflow(OnlineDDL, in)
	var res OnlineDDLResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Phase != PhaseReverted {
		t.Errorf("phase %s, want reverted", res.Phase)
	}
	var appErr *temporal.ApplicationError
	if !errors.As(completeErr, &appErr) || appErr.Type() != pgerr.ObjectNotInPrerequisiteState {
		t.Errorf("Complete while reverting: %v, want refused with 55000", completeErr)
	}
	for _, s := range shadowPlan.Shards {
		if f.state[s] != ShadowReverted {
			t.Errorf("shard %s: %s, want reverted", s, f.state[s])
		}
	}
	if len(f.ids) != 1 || !f.ids["onlineddl-x/run-1"] {
		t.Errorf("migration ids %v", f.ids)
	}
}
