package workflows

import (
	"errors"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/pgerr"
)

// sourceFailover is the stream's failure when its source failed over.
var sourceFailover = temporal.NewNonRetryableApplicationError("SQLSTATE 55000: source shard s1 failed over (term 1 when its slot was made, 2 now)",
	SourceFailoverError, nil)

// TestSourceFailoverRestartsTheMovement: a stream that fails because its
// source failed over during the catch-up makes the reshard stop the
// streams, undo the movement (ResetMovement) and copy again, from new
// snapshots, with the sources' new terms; it then reaches the cutover
// as usual. A stream that fails otherwise still fails the reshard.
func TestSourceFailoverRestartsTheMovement(t *testing.T) {
	f := &fakeReplicator{lag: 1 << 40, streamErr: sourceFailover}
	env := newReshardEnv(t, f)
	f.streamsEndAt = []time.Time{env.Now().Add(20 * time.Second)}
	var ready ReshardProgress
	env.RegisterDelayedCallback(func() {
		ready = queryProgress(t, env)
		env.SignalWorkflow(CancelSignal, nil)
	}, 30*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if ready.Phase != PhaseReadyForCutover || ready.Restarts != 1 || !strings.Contains(ready.LastRestart, "failed over") ||
		ready.LastDiff == nil || ready.Copied["public.orders"] != 200 {
		t.Fatalf("progress after the restart: %+v", ready)
	}
	if f.called("reset") != 1 || f.called("copy s1") != 2 || f.called("copy s2") != 2 {
		t.Fatalf("calls %v", f.calls)
	}
	if len(f.copyTerms) != 2 || f.copyTerms[1] != 2 {
		t.Fatalf("the copies' plans held s1's terms %v, want the new term 2 in the second", f.copyTerms)
	}
	if res.Phase != PhaseCancelled || f.called("cleanup") != 1 {
		t.Fatalf("result %+v, calls %v", res, f.calls)
	}
}

// TestSourceFailoverRestartsAreBounded: a source that keeps failing
// over stops the movement after maxMovementRestarts restarts, saying
// why, and what it made is dropped.
func TestSourceFailoverRestartsAreBounded(t *testing.T) {
	f := &fakeReplicator{lag: 1 << 40, streamErr: sourceFailover, stickyStreamErr: true}
	env := newReshardEnv(t, f)
	for i := range 2 * maxMovementRestarts {
		f.streamsEndAt = append(f.streamsEndAt, env.Now().Add(time.Duration(i+1)*30*time.Second))
	}
	env.ExecuteWorkflow(Reshard, reshardIn)
	err := env.GetWorkflowResult(nil)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != pgerr.ObjectNotInPrerequisiteState || !strings.Contains(err.Error(), "failed over 4 times") {
		t.Fatalf("workflow error %v", err)
	}
	if f.called("reset") != maxMovementRestarts || f.called("cleanup") != 1 {
		t.Fatalf("calls %v", f.calls)
	}
}

// TestTargetFailoverBreaksTheReverseStreams: after the cutover, a
// reverse stream that fails because its source (a target) failed over
// does not fail the reshard: the progress says why, ReverseTraffic is
// refused (55000, naming the reason), and Complete ends it.
func TestTargetFailoverBreaksTheReverseStreams(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20}
	env := newReshardEnv(t, f)
	f.streamsEndAt = []time.Time{env.Now().Add(10*time.Minute + time.Second), env.Now().Add(15 * time.Minute)}
	var switchErr, reverseErr, completeErr error
	var broken ReshardProgress
	env.RegisterDelayedCallback(func() { update(env, SwitchTrafficUpdate, &switchErr) }, 10*time.Minute)
	env.RegisterDelayedCallback(func() {
		f.mu.Lock()
		f.streamErr = temporal.NewNonRetryableApplicationError("SQLSTATE 55000: source shard t1 failed over (term 1 when its slot was made, 2 now)",
			SourceFailoverError, nil)
		f.mu.Unlock()
	}, 12*time.Minute)
	env.RegisterDelayedCallback(func() {
		broken = queryProgress(t, env)
		update(env, ReverseTrafficUpdate, &reverseErr)
	}, 20*time.Minute)
	env.RegisterDelayedCallback(func() { update(env, CompleteUpdate, &completeErr) }, 21*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if switchErr != nil || completeErr != nil {
		t.Fatalf("SwitchTraffic: %v; Complete: %v", switchErr, completeErr)
	}
	if broken.Phase != PhaseSwitched || !strings.Contains(broken.ReverseBroken, "t1 failed over") || broken.Error == "" {
		t.Fatalf("progress after the target's failover: %+v", broken)
	}
	var appErr *temporal.ApplicationError
	if !errors.As(reverseErr, &appErr) || appErr.Type() != pgerr.ObjectNotInPrerequisiteState || !strings.Contains(reverseErr.Error(), "t1 failed over") {
		t.Fatalf("ReverseTraffic after the target's failover: %v", reverseErr)
	}
	if res.Phase != PhaseCompleted || f.called("complete") != 1 || f.called("reset") != 0 {
		t.Fatalf("result %+v, calls %v", res, f.calls)
	}
}
