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
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tesseradb/tessera/pgerr"
)

// fakeShadow stands in for the shadow path's activities (tested on real
// Postgres in package onlineddl): each shard's shadow state moves as the
// real one does, and refuses a step out of order.
type fakeShadow struct {
	mu    sync.Mutex
	state map[string]string
	// swapFails: that many swap attempts on a shard fail (a lock timeout).
	swapFails map[string]int
	// copyWait, when set, holds every copy until closed or cancelled.
	copyWait chan struct{}
	streams  map[string]int // reverse streams started per shard
	calls    []string
}

func (f *fakeShadow) register(env *testsuite.TestWorkflowEnvironment) {
	f.state, f.streams = map[string]string{}, map[string]int{}
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
			if in.MigrationID == "" || in.Plan.Table != "orders" || in.LockTimeoutMillis != 1000 {
				return ShadowResult{}, temporal.NewNonRetryableApplicationError("bad input", pgerr.InternalError, nil)
			}
			if f.state[in.Shard] == to {
				return ShadowResult{State: to, AlreadyDone: true}, nil
			}
			if !slices.Contains(from, f.state[in.Shard]) {
				return ShadowResult{}, temporal.NewNonRetryableApplicationError(name+" from state "+f.state[in.Shard], pgerr.ObjectNotInPrerequisiteState, nil)
			}
			if name == SwapShadowActivity && f.swapFails[in.Shard] > 0 {
				f.swapFails[in.Shard]--
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
