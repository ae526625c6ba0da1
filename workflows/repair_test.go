package workflows

import (
	"errors"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/topo/store"
)

func runRepair(t *testing.T, f *fakeShard) RepairResult {
	t.Helper()
	f.env.ExecuteWorkflow(RepairShardName, RepairInput{Shard: "s1"})
	if err := f.env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res RepairResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// After a failover to b: the old primary a came back acting as a
// primary, c still follows a, and b's standbys are unset.
func TestRepairShardAfterFailover(t *testing.T) {
	f := newFake(t, "s1")
	f.state = store.ShardState{Shard: "s1", Primary: "b", Term: 2}
	f.primary("a", "z1", 700)
	f.primary("b", "z1", 600)
	f.replica("c", "z2", "a", 700, 700)
	f.replica("d", "z2", "b", 600, 600)
	res := runRepair(t, f)
	a, c := f.node("a"), f.node("c")
	if a.Role != store.RoleReplica || a.following != "b" {
		t.Errorf("a not rejoined: %+v following %q", a.InstanceView, a.following)
	}
	if got := f.called("FenceInstance"); len(got) != 1 || got[0] != "a" {
		t.Errorf("fenced %v, want a before its rewind", got)
	}
	// c is repointed (a is the one rewind).
	if c.following != "b" || len(f.called("RewindInstance")) != 1 {
		t.Errorf("c follows %q; rewinds %v", c.following, f.called("RewindInstance"))
	}
	if got := f.node("b").SynchronousStandbyNames; got != `ANY 1 ("a", "c", "d")` {
		t.Errorf("standbys on b: %q", got)
	}
	if len(res.Actions) != 3 {
		t.Errorf("actions %q", res.Actions)
	}
	// Repairing a repaired shard does nothing.
	g := newFake(t, "s1")
	g.state, g.nodes = f.state, f.nodes
	if res := runRepair(t, g); len(res.Actions) != 0 {
		t.Errorf("second repair: %q", res.Actions)
	}
}

func TestRepairShardRewindsAReplicaThatCannotFollow(t *testing.T) {
	f := newFake(t, "s1")
	f.state = store.ShardState{Shard: "s1", Primary: "b", Term: 2, Durability: store.DurabilityAsync}
	f.primary("b", "z1", 600)
	f.replica("c", "z2", "a", 700, 700)
	f.fail["FollowPrimary"] = errors.New("cannot follow")
	res := runRepair(t, f)
	if f.node("c").following != "b" || len(f.called("RewindInstance")) != 1 || len(res.Actions) != 1 {
		t.Errorf("c follows %q, rewinds %v, actions %q", f.node("c").following, f.called("RewindInstance"), res.Actions)
	}
}

func TestRepairShardAdoptsTheReportedPrimary(t *testing.T) {
	f := newFake(t, "s1")
	f.primary("a", "z1", 100)
	f.replica("b", "z1", "a", 100, 100)
	f.node("a").SynchronousStandbyNames = `ANY 1 ("b")`
	res := runRepair(t, f)
	if f.state.Primary != "a" || f.state.Term != 1 || len(res.Actions) != 1 {
		t.Errorf("state %+v, actions %q", f.state, res.Actions)
	}
}

func TestRepairShardLeavesAShardUnderSwitchover(t *testing.T) {
	f := newFake(t, "s1")
	f.state = store.ShardState{Shard: "s1", Primary: "a", Term: 1}
	f.primary("a", "z1", 100).Fenced = true
	f.primary("b", "z1", 100) // just promoted, not yet published
	res := runRepair(t, f)
	if len(res.Actions) != 0 || len(f.called("FenceInstance")) != 0 || len(f.called("RewindInstance")) != 0 {
		t.Errorf("repair interfered: actions %q, calls %q", res.Actions, f.calls)
	}
}

func TestRejoin(t *testing.T) {
	f := newFake(t, "s1")
	f.state = store.ShardState{Shard: "s1", Primary: "b", Term: 2}
	f.primary("a", "z1", 700)
	f.primary("b", "z1", 600)
	f.env.ExecuteWorkflow(RejoinName, RejoinInput{Shard: "s1", Instance: "a"})
	var res RejoinResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if a := f.node("a"); res.Primary != "b" || a.Role != store.RoleReplica || a.following != "b" {
		t.Errorf("result %+v, a %+v following %q", res, a.InstanceView, a.following)
	}
	if got := f.node("b").SynchronousStandbyNames; got != `ANY 1 ("a")` {
		t.Errorf("standbys on b: %q", got)
	}

	g := newFake(t, "s1")
	g.state, g.nodes = f.state, f.nodes
	g.env.ExecuteWorkflow(RejoinName, RejoinInput{Shard: "s1", Instance: "b"})
	var appErr *temporal.ApplicationError
	if err := g.env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != "22023" {
		t.Errorf("rejoining the primary: %v", err)
	}
}

func TestSetDurability(t *testing.T) {
	f := newFake(t, "s1")
	f.state = store.ShardState{Shard: "s1", Primary: "a"}
	f.primary("a", "z1", 100)
	f.replica("b", "z1", "a", 100, 100)
	f.replica("c", "z2", "a", 100, 100)
	f.env.ExecuteWorkflow(SetDurabilityName, DurabilityInput{Shard: "s1", Policy: store.DurabilityCrossZoneSync})
	var res DurabilityResult
	if err := f.env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.SynchronousStandbyNames != `ANY 1 ("c")` || f.state.Durability != store.DurabilityCrossZoneSync {
		t.Errorf("result %+v, state %+v", res, f.state)
	}

	g := newFake(t, "s1")
	g.env.ExecuteWorkflow(SetDurabilityName, DurabilityInput{Shard: "s1", Policy: "quorum"})
	var appErr *temporal.ApplicationError
	if err := g.env.GetWorkflowError(); !errors.As(err, &appErr) || appErr.Type() != "22023" {
		t.Errorf("unknown policy: %v", err)
	}
}
