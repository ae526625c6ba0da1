package workflows

import (
	"errors"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/pgerr"
)

// TestCutoverWaitsForSwitchoverThenRefuses: while a switchover is
// recorded on one of the shards, SwitchTraffic retries its record for a
// bounded time, then is refused with SQLSTATE 55006 having fenced and
// buffered nothing; asked again once the switchover has ended, it runs,
// and its records on every shard of the plan end with it.
func TestCutoverWaitsForSwitchoverThenRefuses(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20}
	busy := true
	var asked []activities.OperationInput
	f.opConflict = func(in activities.OperationInput) error {
		asked = append(asked, in)
		if busy {
			return temporal.NewApplicationError("shard s2: the switchover of switchover-s2 excludes a cutover", pgerr.ObjectInUse)
		}
		return nil
	}
	env := newReshardEnv(t, f)
	f.streamsEndAt = []time.Time{env.Now().Add(20*time.Minute + time.Second)}
	var refused, switched error
	var after ReshardProgress
	env.RegisterDelayedCallback(func() { update(env, SwitchTrafficUpdate, &refused) }, 10*time.Minute)
	env.RegisterDelayedCallback(func() {
		after = queryProgress(t, env)
		f.mu.Lock()
		busy = false
		f.mu.Unlock()
		update(env, SwitchTrafficUpdate, &switched)
	}, 20*time.Minute)
	env.RegisterDelayedCallback(func() { update(env, CompleteUpdate, new(error)) }, 30*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	if err := env.GetWorkflowResult(nil); err != nil {
		t.Fatal(err)
	}
	var appErr *temporal.ApplicationError
	if !errors.As(refused, &appErr) || appErr.Type() != pgerr.ObjectInUse {
		t.Fatalf("SwitchTraffic during a switchover: %v, want SQLSTATE 55006", refused)
	}
	if after.Phase != PhaseReadyForCutover || after.Cutover != nil {
		t.Fatalf("after the refusal: %+v", after)
	}
	if switched != nil {
		t.Fatalf("SwitchTraffic once the switchover ended: %v", switched)
	}
	// The refused one retried (a bounded wait) and touched nothing.
	if n := f.called("begin cutover"); n < 3 {
		t.Fatalf("the cutover's record was tried %d times", n)
	}
	first := slices.Index(f.calls, "buffer")
	if first < 0 || f.called("fence") != 1 || f.called("end cutover") != 1 {
		t.Fatalf("calls %v", f.calls)
	}
	if want := []string{"s1", "s2", "t1", "t2", "t3", "t4"}; !slices.Equal(asked[0].Shards, want) {
		t.Fatalf("the cutover recorded itself on %v, want %v", asked[0].Shards, want)
	}
}

// TestFailoverDuringCutoverBacksItOff: a failover that begins on one of
// the shards while the cutover runs (its record appears after the
// cutover's) makes the cutover back off before the topology switch: the
// fence and buffer are undone, SwitchTraffic fails with 55006, and the
// reshard waits for the next SwitchTraffic.
func TestFailoverDuringCutoverBacksItOff(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20}
	n := 0
	f.opConflict = func(in activities.OperationInput) error {
		n++
		if n == 2 { // the re-check before the switch
			return temporal.NewApplicationError("shard s1: the failover of failover-s1 excludes a cutover", pgerr.ObjectInUse)
		}
		return nil
	}
	env := newReshardEnv(t, f)
	f.streamsEndAt = []time.Time{env.Now().Add(10*time.Minute + time.Second)}
	var switchErr error
	var after ReshardProgress
	env.RegisterDelayedCallback(func() { update(env, SwitchTrafficUpdate, &switchErr) }, 10*time.Minute)
	env.RegisterDelayedCallback(func() {
		after = queryProgress(t, env)
		env.SignalWorkflow(CancelSignal, nil)
	}, 20*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	if err := env.GetWorkflowResult(nil); err != nil {
		t.Fatal(err)
	}
	var appErr *temporal.ApplicationError
	if !errors.As(switchErr, &appErr) || appErr.Type() != pgerr.ObjectInUse {
		t.Fatalf("SwitchTraffic during a failover: %v", switchErr)
	}
	if after.Phase != PhaseReadyForCutover || after.Cutover != nil {
		t.Fatalf("after the backed-off cutover: %+v", after)
	}
	if f.fenced || f.buffered || f.called("switch") != 0 || f.called("unfence") != 1 || f.called("end cutover") != 1 {
		t.Fatalf("fenced %v, buffered %v, calls %v", f.fenced, f.buffered, f.calls)
	}
}
