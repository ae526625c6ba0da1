package workflows

import (
	"errors"
	"slices"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/topo/store"
)

// healthyShard: a is the primary at 500; b and c stream from it, behind.
func healthyShard(t *testing.T) *fakeShard {
	f := newFake(t, "s1")
	f.state = store.ShardState{Shard: "s1", Primary: "a", Term: 1, Durability: store.DurabilityCrossZoneSync}
	f.primary("a", "z1", 500)
	f.replica("b", "z1", "a", 480, 480)
	f.replica("c", "z2", "a", 480, 480)
	return f
}

func TestSwitchoverMovesThePrimary(t *testing.T) {
	f := healthyShard(t)
	f.env.ExecuteWorkflow(SwitchoverName, SwitchoverInput{Shard: "s1"})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res SwitchoverResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	// b is ready but c is the cross-zone synchronous standby: both have
	// everything, so the policy's standby is preferred.
	if res.OldPrimary != "a" || res.NewPrimary != "c" || res.Term != 2 || res.PauseMillis < 0 {
		t.Fatalf("result %+v", res)
	}
	if f.state.Primary != "c" || f.state.Term != 2 || f.state.Buffer != nil {
		t.Errorf("shard state %+v", f.state)
	}
	c := f.node("c")
	if c.Role != store.RolePrimary || c.CurrentLSN < 500 {
		t.Errorf("c was promoted before replaying the old primary's WAL: %+v", c.InstanceView)
	}
	a := f.node("a")
	if a.Role != store.RoleReplica || a.following != "c" || a.Fenced {
		t.Errorf("old primary did not rejoin: %+v following %q", a.InstanceView, a.following)
	}
	if f.node("b").following != "c" {
		t.Errorf("b follows %q", f.node("b").following)
	}
	// cross_zone_sync: the new primary is in z2, a and b in z1.
	if c.SynchronousStandbyNames != `ANY 1 ("a", "b")` {
		t.Errorf("durability on c: %q", c.SynchronousStandbyNames)
	}
	order := []string{}
	for _, call := range f.calls {
		switch call {
		case "SetBuffer s1", "FenceInstance a", "WaitForReplay c", "PromoteInstance c", "PublishPrimary c", "ClearBuffer s1", "RewindInstance a":
			order = append(order, call)
		}
	}
	want := []string{"SetBuffer s1", "FenceInstance a", "WaitForReplay c", "PromoteInstance c", "PublishPrimary c", "ClearBuffer s1", "RewindInstance a"}
	if !slices.Equal(order, want) {
		t.Errorf("steps ran in order %q, want %q", order, want)
	}
	// The durability policy is set on the candidate alongside its
	// promotion, and holds before routers resume.
	if d, c := slices.Index(f.calls, "ApplyDurability c"), slices.Index(f.calls, "ClearBuffer s1"); d < 0 || d > c {
		t.Errorf("durability applied at step %d, the buffer cleared at step %d: %q", d, c, f.calls)
	}
}

func TestSwitchoverToTheAskedCandidate(t *testing.T) {
	f := healthyShard(t)
	f.env.ExecuteWorkflow(SwitchoverName, SwitchoverInput{Shard: "s1", Candidate: "b"})
	var res SwitchoverResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.NewPrimary != "b" || f.state.Primary != "b" {
		t.Fatalf("result %+v", res)
	}
}

func TestSwitchoverRefusesABadCandidate(t *testing.T) {
	for _, cand := range []string{"a", "nope"} {
		f := healthyShard(t)
		f.env.ExecuteWorkflow(SwitchoverName, SwitchoverInput{Shard: "s1", Candidate: cand})
		var appErr *temporal.ApplicationError
		if err := f.env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != "22023" {
			t.Errorf("candidate %q: error %v, want 22023", cand, err)
		}
		if len(f.called("FenceInstance")) != 0 || f.state.Buffer != nil {
			t.Errorf("candidate %q: the shard was touched", cand)
		}
	}
}

// compensated checks a switchover that failed before publishing: the old
// primary is writable again, the buffer signal gone, nothing promoted or
// published, and the failure carries the step's SQLSTATE.
func compensated(t *testing.T, f *fakeShard, code string) {
	t.Helper()
	var appErr *temporal.ApplicationError
	if err := f.env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != code {
		t.Fatalf("error %v, want SQLSTATE %s", err, code)
	}
	a := f.node("a")
	if a.Fenced || !a.Writable || f.state.Buffer != nil || f.state.Primary != "a" || f.state.Term != 1 {
		t.Errorf("not undone: a %+v, state %+v", a.InstanceView, f.state)
	}
	if got := f.called("UnfenceInstance"); !slices.Equal(got, []string{"a"}) {
		t.Errorf("unfenced %v", got)
	}
}

func TestSwitchoverUndoneWhenTheCandidateLags(t *testing.T) {
	f := healthyShard(t)
	f.replayStuck = true
	f.env.ExecuteWorkflow(SwitchoverName, SwitchoverInput{Shard: "s1"})
	compensated(t, f, "57014")
	if got := f.called("PromoteInstance"); len(got) != 0 {
		t.Errorf("promoted %v without the candidate catching up", got)
	}
}

func TestSwitchoverUndoneWhenPromotionFails(t *testing.T) {
	f := healthyShard(t)
	f.fail["PromoteInstance"] = activities.Refuse("55000", "cannot promote")
	f.env.ExecuteWorkflow(SwitchoverName, SwitchoverInput{Shard: "s1"})
	compensated(t, f, "55000")
}

func TestSwitchoverUndoneWhenFencingFails(t *testing.T) {
	f := healthyShard(t)
	f.fail["FenceInstance"] = activities.Refuse("08006", "sidecar gone")
	f.env.ExecuteWorkflow(SwitchoverName, SwitchoverInput{Shard: "s1"})
	compensated(t, f, "08006")
}

func TestSwitchoverNeedsAServingPrimary(t *testing.T) {
	f := healthyShard(t)
	f.node("a").Reachable = false
	f.env.ExecuteWorkflow(SwitchoverName, SwitchoverInput{Shard: "s1"})
	var appErr *temporal.ApplicationError
	if err := f.env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != "55000" {
		t.Fatalf("error %v, want 55000", err)
	}
	if f.state.Buffer != nil {
		t.Error("buffered a shard it could not switch over")
	}
}
