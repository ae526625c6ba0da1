package workflows

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/topo/store"
)

// lostPrimary is a shard whose primary a is gone: b is ready, c received
// more but replays behind.
func lostPrimary(t *testing.T) *fakeShard {
	f := newFake(t, "s1")
	f.state = store.ShardState{Shard: "s1", Primary: "a", Term: 3}
	a := f.primary("a", "z1", 300)
	a.Reachable, a.Serving, a.Writable = false, false, false
	f.replica("b", "z1", "a", 200, 200)
	f.replica("c", "z2", "a", 300, 250)
	return f
}

func runFailover(t *testing.T, f *fakeShard, in FailoverInput) FailoverResult {
	t.Helper()
	f.env.ExecuteWorkflow(FailoverName, in)
	if !f.env.IsWorkflowCompleted() {
		t.Fatal("failover did not complete")
	}
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatalf("failover failed: %v", err)
	}
	var res FailoverResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

func TestFailoverPromotesTheReplicaWithMostWAL(t *testing.T) {
	f := lostPrimary(t)
	res := runFailover(t, f, FailoverInput{Shard: "s1", Reason: "test"})
	if res.OldPrimary != "a" || res.NewPrimary != "c" || res.Term != 4 {
		t.Fatalf("result %+v", res)
	}
	if f.state.Primary != "c" || f.state.Term != 4 {
		t.Errorf("shard state %+v", f.state)
	}
	if got := f.node("b").following; got != "c" {
		t.Errorf("b follows %q, want c", got)
	}
	// c waited for a catch-up that did not come: no replica was ready.
	if f.inspects < 2 || !slices.ContainsFunc(res.Steps, func(s string) bool { return strings.HasPrefix(s, "waiting up to 2s") }) {
		t.Errorf("no wait for catch-up: %d inspections, steps %q", f.inspects, res.Steps)
	}
	if got := f.node("c").SynchronousStandbyNames; got != `ANY 1 ("a", "b")` {
		t.Errorf("durability on the new primary: %q", got)
	}
	if got := f.called("FenceInstance"); len(got) != 0 {
		t.Errorf("fenced %v although the old primary was unreachable", got)
	}
}

func TestFailoverWaitsBrieflyForCatchUp(t *testing.T) {
	f := lostPrimary(t)
	f.replica("d", "z2", "a", 300, 100)
	f.onInspect = func(n int) {
		if n == 2 { // while the workflow waits, d replays everything
			f.node("d").ReplayLSN = 300
		}
	}
	res := runFailover(t, f, FailoverInput{Shard: "s1"})
	if res.NewPrimary != "d" {
		t.Fatalf("promoted %s, want d, which caught up; steps %q", res.NewPrimary, res.Steps)
	}
	if f.inspects != 3 {
		t.Errorf("%d inspections, want 3 (stop waiting once one is ready)", f.inspects)
	}
}

func TestFailoverFencesAReachableOldPrimary(t *testing.T) {
	f := lostPrimary(t)
	a := f.node("a")
	a.Reachable, a.Serving = true, true // up, but not writable (disk full, say)
	res := runFailover(t, f, FailoverInput{Shard: "s1"})
	if got := f.called("FenceInstance"); !slices.Equal(got, []string{"a"}) {
		t.Errorf("fenced %v", got)
	}
	if !a.Fenced || res.NewPrimary != "c" {
		t.Errorf("a fenced %v, new primary %s", a.Fenced, res.NewPrimary)
	}
}

func TestFailoverOfAHealthyPrimaryDoesNothing(t *testing.T) {
	f := newFake(t, "s1")
	f.state = store.ShardState{Shard: "s1", Primary: "a", Term: 2}
	f.primary("a", "z1", 100)
	f.replica("b", "z1", "a", 100, 100)
	res := runFailover(t, f, FailoverInput{Shard: "s1"})
	if res.NewPrimary != "a" || res.OldPrimary != "a" || res.Term != 2 {
		t.Fatalf("result %+v", res)
	}
	if last := res.Steps[len(res.Steps)-1]; !strings.Contains(last, "nothing to do") {
		t.Errorf("steps %q", res.Steps)
	}
	for _, op := range []string{"FenceInstance", "PromoteInstance", "PublishPrimary"} {
		if got := f.called(op); len(got) != 0 {
			t.Errorf("%s %v on a healthy shard", op, got)
		}
	}
}

func TestFailoverForcedMovesAHealthyPrimary(t *testing.T) {
	f := newFake(t, "s1")
	f.state = store.ShardState{Shard: "s1", Primary: "a", Term: 2}
	f.primary("a", "z1", 100)
	f.replica("b", "z1", "a", 100, 100)
	res := runFailover(t, f, FailoverInput{Shard: "s1", Force: true})
	if res.NewPrimary != "b" || res.Term != 3 || !f.node("a").Fenced {
		t.Fatalf("result %+v, a fenced %v", res, f.node("a").Fenced)
	}
}

// A failover run again after it finished finds the new primary healthy;
// the term moves once.
func TestFailoverTwiceMovesTheTermOnce(t *testing.T) {
	f := lostPrimary(t)
	runFailover(t, f, FailoverInput{Shard: "s1"})
	g := newFake(t, "s1")
	g.state, g.nodes = f.state, f.nodes
	res := runFailover(t, g, FailoverInput{Shard: "s1"})
	if res.NewPrimary != "c" || res.OldPrimary != "c" || g.state.Term != 4 {
		t.Fatalf("second failover: %+v, state %+v", res, g.state)
	}
}

func TestFailoverWithoutCandidateFails(t *testing.T) {
	f := lostPrimary(t)
	f.node("b").Reachable = false
	f.node("c").Reachable = false
	f.env.ExecuteWorkflow(FailoverName, FailoverInput{Shard: "s1"})
	var appErr *temporal.ApplicationError
	if err := f.env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != "55000" {
		t.Fatalf("error %v, want a 55000 refusal", err)
	}
	if f.state.Primary != "a" || f.state.Term != 3 {
		t.Errorf("shard state changed: %+v", f.state)
	}
}

func TestStepQuery(t *testing.T) {
	f := lostPrimary(t)
	var during string
	f.env.RegisterDelayedCallback(func() {
		v, err := f.env.QueryWorkflow(StepQuery)
		if err != nil {
			t.Error(err)
			return
		}
		if err := v.Get(&during); err != nil {
			t.Error(err)
		}
	}, time.Second)
	res := runFailover(t, f, FailoverInput{Shard: "s1"})
	if during != "waiting up to 2s for a replica to replay all WAL received" {
		t.Errorf("step during the catch-up wait: %q", during)
	}
	v, err := f.env.QueryWorkflow(StepQuery)
	if err != nil {
		t.Fatal(err)
	}
	var after string
	if err := v.Get(&after); err != nil {
		t.Fatal(err)
	}
	if after != res.Steps[len(res.Steps)-1] {
		t.Errorf("step after the end %q, want the last step %q", after, res.Steps[len(res.Steps)-1])
	}
}
