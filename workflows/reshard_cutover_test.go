package workflows

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tesseradb/tessera/pgerr"
)

// registerFakeCutover stands in for the cutover's activities (tested on
// real Postgres and etcd in package replicator/actions): each records its
// call, and they refuse to run out of order.
func registerFakeCutover(t *testing.T, env *testsuite.TestWorkflowEnvironment, f *fakeReplicator, reg func(string, any)) {
	streamsStopped := func(p ReshardPlan) error {
		for _, s := range p.Sources {
			if f.streaming[s] {
				return errors.New("stream " + s + " still runs")
			}
		}
		return nil
	}
	reg(CheckCutoverActivity, func(ctx context.Context, in CutoverInput) (CheckCutoverResult, error) {
		f.record("check")
		if in.MaxLagBytes != defaultMaxLagBytes || in.BufferID != "default-test-workflow-id" {
			return CheckCutoverResult{}, errors.New("bad cutover input")
		}
		return CheckCutoverResult{CatchUpSeconds: map[string]float64{"s1": 0.5}}, nil
	})
	reg(SetTableBufferActivity, func(ctx context.Context, in CutoverInput) (time.Time, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls, f.buffered = append(f.calls, "buffer"), true
		return time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), nil
	})
	reg(FenceSourcesActivity, func(ctx context.Context, in CutoverInput) (FenceResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls = append(f.calls, "fence")
		if f.fenceErr != nil {
			return FenceResult{}, f.fenceErr
		}
		f.fenced = true
		return FenceResult{Markers: map[string]string{"s1": "0/100", "s2": "0/200"}, Fenced: time.Date(2026, 1, 1, 0, 0, 0, 100e6, time.UTC)}, nil
	})
	reg(SetSequencesActivity, func(ctx context.Context, in CutoverInput) (map[string]int64, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := streamsStopped(in.Plan); err != nil {
			return nil, err
		}
		f.calls = append(f.calls, "sequences")
		return map[string]int64{}, nil
	})
	reg(PrepareReverseActivity, func(ctx context.Context, in CutoverInput) error {
		f.record("reverse")
		return nil
	})
	reg(SwitchTopologyActivity, func(ctx context.Context, in CutoverInput) (SwitchTopologyResult, error) {
		f.record("switch")
		return SwitchTopologyResult{Revision: 7, Switched: time.Date(2026, 1, 1, 0, 0, 0, 400e6, time.UTC)}, nil
	})
	reg(WaitRoutersActivity, func(ctx context.Context, in CutoverInput) (WaitRoutersResult, error) {
		f.record("routers")
		if in.Revision != 7 {
			return WaitRoutersResult{}, errors.New("waiting for the wrong revision")
		}
		f.mu.Lock()
		defer f.mu.Unlock()
		return WaitRoutersResult{Waiting: f.lagging}, nil
	})
	reg(ClearTableBufferActivity, func(ctx context.Context, in CutoverInput) (time.Time, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls, f.buffered = append(f.calls, "unbuffer"), false
		return time.Date(2026, 1, 1, 0, 0, 0, 600e6, time.UTC), nil
	})
	reg(UnfenceSourcesActivity, func(ctx context.Context, in CutoverInput) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		// Under the lock: the fake streams read fenced from their own
		// goroutines (the race detector found it in CI).
		f.calls, f.fenced = append(f.calls, "unfence"), false
		return nil
	})
	reg(SwitchReplicaReadsActivity, func(ctx context.Context, in ReadsInput) (SwitchTopologyResult, error) {
		if in.On {
			f.record("reads on")
		} else {
			f.record("reads off")
		}
		return SwitchTopologyResult{Revision: 7, Switched: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}, nil
	})
	reg(CompleteReshardActivity, func(ctx context.Context, p ReshardPlan) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := streamsStopped(p.Reversed()); err != nil {
			return err
		}
		f.calls, f.fenced, f.slots = append(f.calls, "complete"), false, map[string]bool{}
		return nil
	})
}

// update sends an update and returns its outcome: rejected, or the
// handler's error. Each call is a new update (an update id seen before
// answers with the earlier outcome).
func update(env *testsuite.TestWorkflowEnvironment, name string, out *error, args ...any) {
	updates++
	env.UpdateWorkflow(name, fmt.Sprintf("%s-%d", name, updates), &testsuite.TestUpdateCallback{
		OnReject:   func(err error) { *out = err },
		OnAccept:   func() {},
		OnComplete: func(_ any, err error) { *out = err },
	}, args...)
}

var updates int

func TestReshardSwitchTrafficThenComplete(t *testing.T) {
	// t1 has a replicator: the reverse stream from it runs there.
	f := &fakeReplicator{lag: 50 << 20, queues: map[string]string{"t1": ReplicatorQueue("t1")}}
	env := newReshardEnv(t, f)
	// The running streams apply the fence's marker a second after it.
	f.streamsEndAt = []time.Time{env.Now().Add(10*time.Minute + time.Second)}
	var early, switchErr, cancelDuring, completeErr error
	var afterSwitch ReshardProgress
	env.RegisterDelayedCallback(func() { update(env, SwitchTrafficUpdate, &early) }, time.Second)
	env.RegisterDelayedCallback(func() { update(env, SwitchTrafficUpdate, &switchErr) }, 10*time.Minute)
	env.RegisterDelayedCallback(func() {
		afterSwitch = queryProgress(t, env)
		env.SignalWorkflow(CancelSignal, nil) // refused: the cutover is done
		update(env, SwitchTrafficUpdate, &cancelDuring)
	}, 20*time.Minute)
	env.RegisterDelayedCallback(func() { update(env, CompleteUpdate, &completeErr) }, 30*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	var appErr *temporal.ApplicationError
	if !errors.As(early, &appErr) || appErr.Type() != pgerr.ObjectNotInPrerequisiteState {
		t.Fatalf("SwitchTraffic while copying: %v", early)
	}
	if switchErr != nil || completeErr != nil {
		t.Fatalf("SwitchTraffic: %v; Complete: %v", switchErr, completeErr)
	}
	if !errors.As(cancelDuring, &appErr) || appErr.Type() != pgerr.ObjectNotInPrerequisiteState {
		t.Fatalf("SwitchTraffic when switched: %v", cancelDuring)
	}
	if afterSwitch.Phase != PhaseSwitched || afterSwitch.Cutover == nil || afterSwitch.Cutover.Revision != 7 ||
		afterSwitch.Cutover.WritePause() != 300*time.Millisecond || afterSwitch.Cutover.BufferHeld() != 600*time.Millisecond {
		t.Fatalf("progress after the switch: %+v %+v", afterSwitch, afterSwitch.Cutover)
	}
	if res.Phase != PhaseCompleted || f.fenced || f.buffered || len(f.slots) != 0 {
		t.Fatalf("result %+v, fenced %v, buffered %v", res, f.fenced, f.buffered)
	}
	// The steps in order; then the reverse streams (from the targets) run
	// until Complete, which first checks the routers again, stops them.
	want := []string{"check", "buffer", "fence", "sequences", "reverse", "switch", "routers", "unbuffer", "routers"}
	var got []string
	for _, c := range f.calls {
		if slices.Contains(want, c) {
			got = append(got, c)
		}
	}
	if len(got) != len(want) {
		t.Fatalf("cutover steps %v, want %v (all calls %v)", got, want, f.calls)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("cutover steps %v, want %v", got, want)
		}
	}
	if f.called("stream s") != 4 || f.called("stream t") != 4 || f.called("complete") != 1 || f.called("cleanup") != 0 {
		t.Fatalf("calls %v", f.calls)
	}
	if q := f.ranOn["stream t1"]; len(q) != 1 || q[0] != "replicator-t1" {
		t.Fatalf("the reverse stream from t1 ran on %v, want replicator-t1", q)
	}
	if q := f.ranOn["stream s1"]; len(q) != 2 || q[0] != "default-test-taskqueue" {
		t.Fatalf("the streams from s1 ran on %v, want the workflow's queue", q)
	}
}

// TestReshardCompleteWaitsForEveryRouter: Complete drops the sources'
// fence, so while a router still routes by the old topology it is refused
// (55000) and changes nothing; asked again once the router has caught up,
// it completes.
func TestReshardCompleteWaitsForEveryRouter(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20}
	env := newReshardEnv(t, f)
	f.streamsEndAt = []time.Time{env.Now().Add(10*time.Minute + time.Second)}
	var switchErr, refused, completeErr error
	var afterRefusal ReshardProgress
	env.RegisterDelayedCallback(func() { update(env, SwitchTrafficUpdate, &switchErr) }, 10*time.Minute)
	env.RegisterDelayedCallback(func() {
		f.mu.Lock()
		f.lagging = []string{"router-a"}
		f.mu.Unlock()
		update(env, CompleteUpdate, &refused)
	}, 20*time.Minute)
	env.RegisterDelayedCallback(func() {
		afterRefusal = queryProgress(t, env)
		f.mu.Lock()
		f.lagging = nil
		f.mu.Unlock()
		update(env, CompleteUpdate, &completeErr)
	}, 30*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	var appErr *temporal.ApplicationError
	if switchErr != nil || completeErr != nil {
		t.Fatalf("SwitchTraffic: %v; second Complete: %v", switchErr, completeErr)
	}
	if !errors.As(refused, &appErr) || appErr.Type() != pgerr.ObjectNotInPrerequisiteState {
		t.Fatalf("Complete with a lagging router: %v", refused)
	}
	if afterRefusal.Phase != PhaseSwitched {
		t.Fatalf("phase after the refused Complete: %s", afterRefusal.Phase)
	}
	if res.Phase != PhaseCompleted || f.called("complete") != 1 {
		t.Fatalf("result %+v, calls %v", res, f.calls)
	}
}

func TestReshardFailedFenceUndoesTheCutover(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20,
		fenceErr: temporal.NewNonRetryableApplicationError("canceling statement due to lock timeout", "55P03", nil)}
	env := newReshardEnv(t, f)
	var switchErr error
	var after ReshardProgress
	env.RegisterDelayedCallback(func() { update(env, SwitchTrafficUpdate, &switchErr) }, 10*time.Minute)
	env.RegisterDelayedCallback(func() {
		after = queryProgress(t, env)
		env.SignalWorkflow(CancelSignal, nil)
	}, 20*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	var appErr *temporal.ApplicationError
	if !errors.As(switchErr, &appErr) || appErr.Type() != "55P03" {
		t.Fatalf("SwitchTraffic with a failing fence: %v", switchErr)
	}
	if after.Phase != PhaseReadyForCutover || after.Cutover != nil {
		t.Fatalf("progress after the failed cutover: %+v", after)
	}
	if f.fenced || f.buffered || f.called("unfence") != 1 || f.called("switch") != 0 || f.called("stream s") != 6 {
		t.Fatalf("fenced %v, buffered %v, calls %v", f.fenced, f.buffered, f.calls)
	}
	// The streams restarted after the undo stop only at the next fence.
	if g := f.generations; len(g) != 6 || g[3] != 0 || g[4] != 1 || g[5] != 1 {
		t.Fatalf("fence generations of the streams: %v", g)
	}
	if res.Phase != PhaseCancelled || f.called("cleanup") != 1 {
		t.Fatalf("result %+v, calls %v", res, f.calls)
	}
}

func TestReshardSwitchReverseSwitchComplete(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20}
	env := newReshardEnv(t, f)
	start := env.Now()
	for _, m := range []time.Duration{10, 20, 30} {
		f.streamsEndAt = append(f.streamsEndAt, start.Add(m*time.Minute+time.Second))
	}
	var errs [4]error
	var phases [4]string
	env.RegisterDelayedCallback(func() { update(env, SwitchTrafficUpdate, &errs[0]) }, 10*time.Minute)
	env.RegisterDelayedCallback(func() {
		phases[0] = queryProgress(t, env).Phase
		update(env, ReverseTrafficUpdate, &errs[1])
	}, 20*time.Minute)
	env.RegisterDelayedCallback(func() {
		phases[1] = queryProgress(t, env).Phase
		update(env, SwitchTrafficUpdate, &errs[2])
	}, 30*time.Minute)
	env.RegisterDelayedCallback(func() {
		p := queryProgress(t, env)
		phases[2] = p.Phase
		update(env, CompleteUpdate, &errs[3])
	}, 40*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs {
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
	}
	if phases[0] != PhaseSwitched || phases[1] != PhaseReadyForCutover || phases[2] != PhaseSwitched || res.Phase != PhaseCompleted {
		t.Fatalf("phases %v, result %+v", phases, res)
	}
	if f.called("switch") != 3 || f.called("unfence") != 3 || f.called("stream s") != 6 || f.called("stream t") != 8 || f.called("complete") != 1 {
		t.Fatalf("calls %v", f.calls)
	}
	// Each fence has a generation of its own, and so the streams that
	// stop at it.
	if g := f.generations; len(g) != 14 || g[3] != 0 || g[4] != 1 || g[7] != 1 || g[8] != 2 || g[9] != 2 || g[10] != 3 || g[13] != 3 {
		t.Fatalf("fence generations of the streams: %v", g)
	}
}

func TestReshardCancelAfterReverseTrafficDropsBothDirections(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20}
	env := newReshardEnv(t, f)
	start := env.Now()
	f.streamsEndAt = []time.Time{start.Add(10*time.Minute + time.Second), start.Add(20*time.Minute + time.Second)}
	var errs [2]error
	env.RegisterDelayedCallback(func() { update(env, SwitchTrafficUpdate, &errs[0]) }, 10*time.Minute)
	env.RegisterDelayedCallback(func() { update(env, ReverseTrafficUpdate, &errs[1]) }, 20*time.Minute)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(CancelSignal, nil) }, 30*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if errs[0] != nil || errs[1] != nil {
		t.Fatalf("updates: %v", errs)
	}
	// Both directions' slots are dropped, and the targets' fence with
	// them (two unfences after the switches, one by the cancel).
	if res.Phase != PhaseCancelled || f.called("cleanup") != 2 || f.called("unfence") != 3 || f.buffered {
		t.Fatalf("result %+v, calls %v", res, f.calls)
	}
}
