package workflows

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/pgerr"
)

var reads = TrafficInput{Traffic: TrafficReads}

// refusedWith checks that err is a refusal with SQLSTATE code.
func refusedWith(t *testing.T, what string, err error, code string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != code {
		t.Errorf("%s: %v, want a refusal with SQLSTATE %s", what, err, code)
	}
}

// callsOf lists f's calls among names, in order.
func callsOf(f *fakeReplicator, names ...string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if slices.Contains(names, c) {
			out = append(out, c)
		}
	}
	return out
}

// TestReshardSwitchReadsThenWritesThenComplete: SwitchTraffic of reads
// moves replica reads alone (the phase stays ready_for_cutover, the
// progress says so; nothing is fenced), Complete and a second reads
// switch are refused, then SwitchTraffic of writes cuts over as always and
// leaves no reads override, and Complete ends the reshard.
func TestReshardSwitchReadsThenWritesThenComplete(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20}
	env := newReshardEnv(t, f)
	f.streamsEndAt = []time.Time{env.Now().Add(20*time.Minute + time.Second)}
	var readsErr, again, badTraffic, completeEarly, writesErr, completeErr error
	var afterReads, afterWrites ReshardProgress
	env.RegisterDelayedCallback(func() {
		update(env, SwitchTrafficUpdate, &badTraffic, TrafficInput{Traffic: "replicas"})
		update(env, SwitchTrafficUpdate, &readsErr, reads)
	}, 10*time.Minute)
	env.RegisterDelayedCallback(func() {
		afterReads = queryProgress(t, env)
		update(env, SwitchTrafficUpdate, &again, reads)
		update(env, CompleteUpdate, &completeEarly)
	}, 15*time.Minute)
	env.RegisterDelayedCallback(func() { update(env, SwitchTrafficUpdate, &writesErr, TrafficInput{Traffic: TrafficWrites}) }, 20*time.Minute)
	env.RegisterDelayedCallback(func() {
		afterWrites = queryProgress(t, env)
		update(env, CompleteUpdate, &completeErr)
	}, 30*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if readsErr != nil || writesErr != nil || completeErr != nil {
		t.Fatalf("SwitchTraffic reads: %v; writes: %v; Complete: %v", readsErr, writesErr, completeErr)
	}
	refusedWith(t, "traffic replicas", badTraffic, pgerr.InvalidParameterValue)
	refusedWith(t, "a second reads switch", again, pgerr.ObjectNotInPrerequisiteState)
	refusedWith(t, "Complete with only reads switched", completeEarly, pgerr.ObjectNotInPrerequisiteState)
	if afterReads.Phase != PhaseReadyForCutover || afterReads.ReadsSwitched == nil || afterReads.ReadsSwitched.Revision != 7 || afterReads.Cutover != nil {
		t.Fatalf("progress after the reads switch: %+v", afterReads)
	}
	if afterWrites.Phase != PhaseSwitched || afterWrites.ReadsSwitched != nil || afterWrites.Cutover == nil {
		t.Fatalf("progress after the writes switch: %+v", afterWrites)
	}
	if res.Phase != PhaseCompleted {
		t.Fatalf("result %+v", res)
	}
	want := []string{"check", "reads on", "routers", "check", "buffer", "fence", "switch", "routers", "unbuffer", "routers", "complete"}
	if got := callsOf(f, want...); !slices.Equal(got, want) {
		t.Fatalf("steps %v, want %v (all calls %v)", got, want, f.calls)
	}
	if f.called("reads off") != 0 {
		t.Fatalf("calls %v", f.calls)
	}
}

// TestReshardSwitchReadsReverseReadsCancel: a reversed reads switch puts
// replica reads back (ReverseTraffic of writes is refused with the hint),
// and a Cancel while reads are switched puts them back before it drops
// what the reshard made.
func TestReshardSwitchReadsReverseReadsCancel(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20}
	env := newReshardEnv(t, f)
	var errs [4]error
	var reversedWrites, reverseNone error
	var afterReverse ReshardProgress
	env.RegisterDelayedCallback(func() {
		update(env, ReverseTrafficUpdate, &reverseNone, reads)
		update(env, SwitchTrafficUpdate, &errs[0], reads)
	}, 10*time.Minute)
	env.RegisterDelayedCallback(func() {
		update(env, ReverseTrafficUpdate, &reversedWrites)
		update(env, ReverseTrafficUpdate, &errs[1], reads)
	}, 15*time.Minute)
	env.RegisterDelayedCallback(func() {
		afterReverse = queryProgress(t, env)
		update(env, SwitchTrafficUpdate, &errs[2], reads)
	}, 20*time.Minute)
	env.RegisterDelayedCallback(func() { env.SignalWorkflow(CancelSignal, nil) }, 25*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	for i, err := range errs[:3] {
		if err != nil {
			t.Fatalf("update %d: %v", i, err)
		}
	}
	refusedWith(t, "ReverseTraffic of reads not switched", reverseNone, pgerr.ObjectNotInPrerequisiteState)
	refusedWith(t, "ReverseTraffic of writes with reads switched", reversedWrites, pgerr.ObjectNotInPrerequisiteState)
	if afterReverse.Phase != PhaseReadyForCutover || afterReverse.ReadsSwitched != nil {
		t.Fatalf("progress after ReverseTraffic of reads: %+v", afterReverse)
	}
	if res.Phase != PhaseCancelled {
		t.Fatalf("result %+v", res)
	}
	want := []string{"reads on", "reads off", "reads on", "reads off", "cleanup"}
	if got := callsOf(f, want...); !slices.Equal(got, want) {
		t.Fatalf("steps %v, want %v (all calls %v)", got, want, f.calls)
	}
	if f.called("fence") != 0 || f.called("buffer") != 0 {
		t.Fatalf("a reads switch fenced or buffered: %v", f.calls)
	}
}

func TestReshardDetailsShowReadsSwitched(t *testing.T) {
	d := reshardDetails("Reshard store.customer_data", ReshardProgress{Phase: PhaseReadyForCutover, ReadsSwitched: &ReadsSwitch{Revision: 7}}, "waiting")
	if !strings.Contains(d, "- reads switched: replica reads on the targets since topology revision 7") {
		t.Fatalf("details:\n%s", d)
	}
	if d := reshardDetails("Reshard store.customer_data", ReshardProgress{Phase: PhaseReadyForCutover}, "waiting"); strings.Contains(d, "reads switched") {
		t.Fatalf("details without a reads switch:\n%s", d)
	}
}
