package workflows

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tesseradb/tessera/activities"
)

// recordPhases records every TesseraPhase a run upserts, in order. (The
// real server's handling of the attribute is tested in package e2e.)
func recordPhases(t *testing.T, env *testsuite.TestWorkflowEnvironment) *[]string {
	t.Helper()
	var phases []string
	env.OnUpsertTypedSearchAttributes(mock.Anything).Run(func(args mock.Arguments) {
		sa, ok := args.Get(0).(temporal.SearchAttributes)
		if !ok {
			t.Errorf("upserted %T", args.Get(0))
			return
		}
		phase, ok := sa.GetKeyword(phaseKey)
		if !ok || sa.Size() != 1 {
			t.Errorf("upserted %d attributes, phase %q", sa.Size(), phase)
		}
		phases = append(phases, phase)
	}).Return(nil)
	return &phases
}

func currentDetails(t *testing.T, env *testsuite.TestWorkflowEnvironment) string {
	t.Helper()
	v, err := env.QueryWorkflow("__temporal_workflow_metadata")
	if err != nil {
		t.Fatal(err)
	}
	var md sdkpb.WorkflowMetadata
	if err := v.Get(&md); err != nil {
		t.Fatal(err)
	}
	return md.GetCurrentDetails()
}

func TestSwitchoverShowsItsPhases(t *testing.T) {
	f := healthyShard(t)
	phases := recordPhases(t, f.env)
	f.env.ExecuteWorkflow(SwitchoverName, SwitchoverInput{Shard: "s1"})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	want := []string{PhaseInspecting, PhaseDraining, PhaseFencing, PhaseReplaying, PhasePromoting, PhasePublishing,
		PhaseRepointing, PhaseResuming, PhaseRejoining, PhaseDone}
	if !slices.Equal(*phases, want) {
		t.Errorf("phases %q, want %q", *phases, want)
	}
	d := currentDetails(t, f.env)
	if !strings.HasPrefix(d, "**Switchover of shard s1**: done\n") || !strings.Contains(d, "- step: ") {
		t.Errorf("current details %q", d)
	}
}

func TestSwitchoverUndoneShowsFailed(t *testing.T) {
	f := healthyShard(t)
	phases := recordPhases(t, f.env)
	f.fail["PromoteInstance"] = activities.Refuse("55000", "cannot promote")
	f.env.ExecuteWorkflow(SwitchoverName, SwitchoverInput{Shard: "s1"})
	compensated(t, f, "55000")
	if n := len(*phases); n < 3 || !slices.Equal((*phases)[n-3:], []string{PhasePromoting, PhaseUndoing, PhaseFailed}) {
		t.Errorf("phases %q, want promoting, undoing, failed at the end", *phases)
	}
	if d := currentDetails(t, f.env); !strings.HasPrefix(d, "**Switchover of shard s1**: failed\n") || !strings.Contains(d, "letting routers resume") {
		t.Errorf("current details %q", d)
	}
}

func TestFailoverShowsItsPhases(t *testing.T) {
	f := lostPrimary(t)
	phases := recordPhases(t, f.env)
	runFailover(t, f, FailoverInput{Shard: "s1", Reason: "test"})
	want := []string{PhaseInspecting, PhaseReplaying, PhasePromoting, PhasePublishing, PhaseRepointing, PhaseDone}
	if !slices.Equal(*phases, want) {
		t.Errorf("phases %q, want %q", *phases, want)
	}
	if d := currentDetails(t, f.env); !strings.HasPrefix(d, "**Failover of shard s1**: done\n") || !strings.Contains(d, "is primary at term 4") {
		t.Errorf("current details %q", d)
	}
}

func TestReshardShowsItsPhases(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20}
	env := newReshardEnv(t, f)
	phases := recordPhases(t, env)
	var atReady string
	env.RegisterDelayedCallback(func() {
		atReady = currentDetails(t, env)
		env.SignalWorkflow(CancelSignal, nil)
	}, 30*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	want := []string{PhaseCopying, PhaseCatchingUp, PhaseDiffing, PhaseReadyForCutover, PhaseCancelling, PhaseCancelled}
	if !slices.Equal(*phases, want) {
		t.Errorf("phases %q, want %q", *phases, want)
	}
	for _, line := range []string{
		"**Reshard store.customer_data**: ready_for_cutover",
		"- rows copied: 220 of ~200 (public.customers 20, public.orders 200)",
		"- lag: 0 bytes, 0.0 s at most, over 2 streams",
		"- last VDiff: 0 differences over 1 tables (done: true)",
	} {
		if !strings.Contains(atReady, line) {
			t.Errorf("current details at ready lack %q:\n%s", line, atReady)
		}
	}
}

func TestSummaries(t *testing.T) {
	for _, c := range []struct{ got, want string }{
		{reshardIn.Summary(), "Reshard store.customer_data to t1 [, 40), t2 [40, )"},
		{SwitchoverInput{Shard: "s1"}.Summary(), "Switchover of shard s1: primary to the best replica"},
		{SwitchoverInput{Shard: "s1", Candidate: "b"}.Summary(), "Switchover of shard s1: primary to b"},
		{FailoverInput{Shard: "s1", Force: true, Reason: "disk"}.Summary(), "Failover of shard s1 (forced): disk"},
	} {
		if c.got != c.want {
			t.Errorf("summary %q, want %q", c.got, c.want)
		}
	}
}
