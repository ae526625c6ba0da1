package workflows

import (
	"context"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/topo/store"
)

// fakeShard stands in for a shard of real instances in workflow logic
// tests: the activities are stubbed with functions that act on it as
// the real ones act on sidecars and etcd (the real ones are tested
// against a real cluster in package activities).
type fakeShard struct {
	mu    sync.Mutex
	env   *testsuite.TestWorkflowEnvironment
	state store.ShardState
	nodes []*fakeNode
	calls []string
	// onInspect, when set, runs before each InspectShard answers, with
	// how many answered before.
	onInspect func(n int)
	inspects  int
	// replayStuck: WaitForReplay never sees the target reached.
	replayStuck bool
	// fail makes the named activity fail for good.
	fail map[string]error
}

type fakeNode struct {
	activities.InstanceView
	following string
}

func newFake(t *testing.T, shard string) *fakeShard {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	f := &fakeShard{env: env, state: store.ShardState{Shard: shard}, fail: map[string]error{}}
	Register(env, &activities.Activities{})
	f.stub()
	t.Cleanup(func() { env.AssertExpectations(t) })
	return f
}

func (f *fakeShard) primary(id, zone string, lsn pgmanager.LSN) *fakeNode {
	n := &fakeNode{InstanceView: activities.InstanceView{
		Member: activities.Member{ID: id, Zone: zone}, Reachable: true, Serving: true,
		Role: store.RolePrimary, Writable: true, CurrentLSN: lsn,
	}}
	f.nodes = append(f.nodes, n)
	return n
}

func (f *fakeShard) replica(id, zone, following string, received, replayed pgmanager.LSN) *fakeNode {
	n := &fakeNode{InstanceView: activities.InstanceView{
		Member: activities.Member{ID: id, Zone: zone}, Reachable: true, Serving: true,
		Role: store.RoleReplica, ReceiveLSN: received, ReplayLSN: replayed,
	}, following: following}
	f.nodes = append(f.nodes, n)
	return n
}

func (f *fakeShard) node(id string) *fakeNode {
	for _, n := range f.nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// did records a call and returns the failure set for it, if any.
func (f *fakeShard) did(name, instance string) error {
	f.calls = append(f.calls, name+" "+instance)
	return f.fail[name]
}

func (f *fakeShard) called(name string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, c := range f.calls {
		if len(c) > len(name) && c[:len(name)+1] == name+" " {
			out = append(out, c[len(name)+1:])
		}
	}
	return out
}

func unreachable(id string) error {
	return activities.Refuse("08006", "instance %s has no live sidecar", id)
}

// reach returns the node, or the error the real activity gives for an
// instance whose sidecar does not answer.
func (f *fakeShard) reach(id string) (*fakeNode, error) {
	n := f.node(id)
	if n == nil || !n.Reachable {
		return nil, unreachable(id)
	}
	return n, nil
}

func (f *fakeShard) view() activities.ShardView {
	v := activities.ShardView{State: f.state}
	if f.state.Buffer != nil {
		b := *f.state.Buffer
		v.State.Buffer = &b
	}
	for _, n := range f.nodes {
		iv := n.InstanceView
		iv.Streaming = nil
		if !n.Reachable {
			iv = activities.InstanceView{Member: n.Member}
		}
		for _, r := range f.nodes {
			if r.following == n.ID && r.Serving && n.Serving && n.Role == store.RolePrimary {
				iv.Streaming = append(iv.Streaming, r.ID)
			}
		}
		v.Instances = append(v.Instances, iv)
	}
	slices.SortFunc(v.Instances, func(a, b activities.InstanceView) int { return strings.Compare(a.ID, b.ID) })
	return v
}

func (f *fakeShard) stub() {
	on := func(fn any, impl any) { f.env.OnActivity(fn, mock.Anything, mock.Anything).Return(impl).Maybe() }
	on(acts.InspectShard, func(_ context.Context, shard string) (activities.ShardView, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if f.onInspect != nil {
			f.onInspect(f.inspects)
		}
		f.inspects++
		f.calls = append(f.calls, "InspectShard "+shard)
		return f.view(), nil
	})
	on(acts.FenceInstance, func(_ context.Context, in activities.InstanceInput) (activities.FenceResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.did("FenceInstance", in.Instance); err != nil {
			return activities.FenceResult{}, err
		}
		n, err := f.reach(in.Instance)
		if err != nil {
			return activities.FenceResult{}, err
		}
		n.Fenced, n.Writable = true, false
		return activities.FenceResult{CurrentLSN: n.CurrentLSN}, nil
	})
	on(acts.BeginOperation, func(_ context.Context, in activities.OperationInput) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.did("BeginOperation", in.Kind)
	})
	on(acts.EndOperation, func(_ context.Context, in activities.OperationInput) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		return f.did("EndOperation", in.Kind)
	})
	on(acts.DrainTransactions, func(_ context.Context, in activities.DrainInput) (int, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		return 0, f.did("DrainTransactions", in.Instance)
	})
	on(acts.UnfenceInstance, func(_ context.Context, in activities.InstanceInput) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.did("UnfenceInstance", in.Instance); err != nil {
			return err
		}
		n, err := f.reach(in.Instance)
		if err != nil {
			return err
		}
		n.Fenced, n.Writable = false, n.Role == store.RolePrimary
		return nil
	})
	on(acts.PromoteInstance, func(_ context.Context, in activities.InstanceInput) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.did("PromoteInstance", in.Instance); err != nil {
			return err
		}
		n, err := f.reach(in.Instance)
		if err != nil {
			return err
		}
		if n.Role == store.RoleReplica {
			n.Role, n.Writable, n.following = store.RolePrimary, !n.Fenced, ""
			// synchronous_standby_names stays as it was: Postgres
			// keeps it across the promotion.
			n.CurrentLSN, n.ReceiveLSN, n.ReplayLSN = n.Held(), 0, 0
		}
		return nil
	})
	on(acts.PublishPrimary, func(_ context.Context, in activities.PublishInput) (store.ShardState, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.did("PublishPrimary", in.Primary); err != nil {
			return store.ShardState{}, err
		}
		switch f.state.Primary {
		case in.Primary:
		case in.Expected:
			f.state.Primary = in.Primary
			f.state.Term++
		default:
			return store.ShardState{}, activities.Refuse(pgerr.ObjectNotInPrerequisiteState, "moved")
		}
		return f.state, nil
	})
	on(acts.FollowPrimary, func(_ context.Context, in activities.FollowInput) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.did("FollowPrimary", in.Instance); err != nil {
			return err
		}
		n, err := f.reach(in.Instance)
		if err != nil {
			return err
		}
		if n.Role == store.RolePrimary {
			return activities.Refuse(pgerr.ObjectNotInPrerequisiteState, "%s is a primary; use Rewind", in.Instance)
		}
		n.following = in.Primary
		return nil
	})
	on(acts.RewindInstance, func(_ context.Context, in activities.FollowInput) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.did("RewindInstance", in.Instance); err != nil {
			return err
		}
		n, err := f.reach(in.Instance)
		if err != nil {
			return err
		}
		n.Role, n.Writable, n.Fenced, n.following = store.RoleReplica, false, false, in.Primary
		n.SynchronousStandbyNames = ""
		return nil
	})
	on(acts.AwaitStreaming, func(_ context.Context, in activities.FollowInput) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		if n := f.node(in.Instance); n != nil && n.following == in.Primary {
			return nil
		}
		return activities.Refuse("57014", "%s is not streaming from %s", in.Instance, in.Primary)
	})
	on(acts.WaitForReplay, func(_ context.Context, in activities.ReplayInput) (pgmanager.LSN, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.did("WaitForReplay", in.Instance); err != nil {
			return 0, err
		}
		n := f.node(in.Instance)
		if f.replayStuck {
			return n.ReplayLSN, activities.Refuse("57014", "%s replayed up to %s, not %s", in.Instance, n.ReplayLSN, in.LSN)
		}
		n.ReceiveLSN, n.ReplayLSN = max(n.ReceiveLSN, in.LSN), max(n.ReplayLSN, in.LSN)
		return n.ReplayLSN, nil
	})
	on(acts.SetBuffer, func(_ context.Context, in activities.BufferInput) (time.Time, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		now := f.env.Now()
		f.calls = append(f.calls, "SetBuffer "+in.Shard)
		f.state.Buffer = &store.BufferSignal{Reason: in.Reason, Until: now.Add(in.For)}
		return now, nil
	})
	on(acts.ClearBuffer, func(_ context.Context, in activities.BufferInput) (time.Time, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls = append(f.calls, "ClearBuffer "+in.Shard)
		if f.state.Buffer != nil && f.state.Buffer.Reason == in.Reason {
			f.state.Buffer = nil
		}
		return f.env.Now(), nil
	})
	on(acts.StoreDurability, func(_ context.Context, in activities.PolicyInput) (store.ShardState, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.state.Durability = in.Policy
		return f.state, nil
	})
	on(acts.ApplyDurability, func(_ context.Context, in activities.DurabilityInput) (string, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		if err := f.did("ApplyDurability", in.Primary); err != nil {
			return "", err
		}
		primary := in.Primary
		if primary == "" {
			primary = f.state.Primary
		}
		n, err := f.reach(primary)
		if err != nil {
			return "", err
		}
		n.SynchronousStandbyNames = activities.SynchronousStandbyNames(f.state.Durability, primary, f.view().Members())
		return n.SynchronousStandbyNames, nil
	})
}
