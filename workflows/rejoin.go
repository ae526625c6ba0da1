package workflows

import (
	"slices"

	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/store"
)

// RejoinInput names an instance, typically a former primary, to make a
// replica of its shard's current primary.
type RejoinInput struct {
	Shard    string
	Instance string
}

// RejoinResult says what a rejoin did.
type RejoinResult struct {
	Primary string
	Steps   []string
}

// Rejoin makes an instance a replica of its shard's recorded primary:
// fenced first if it still takes writes, then rewound onto the primary's
// timeline (pg_rewind discards what it wrote after the histories forked),
// restarted as a replica, and counted in the durability policy again. An
// instance already streaming from the primary is left alone.
func Rejoin(ctx workflow.Context, in RejoinInput) (RejoinResult, error) {
	p, err := track(ctx)
	if err != nil {
		return RejoinResult{}, err
	}
	if in.Shard == "" || in.Instance == "" {
		return RejoinResult{}, activities.Refuse(pgerr.InvalidParameterValue, "a shard and an instance are required")
	}
	end, err := beginOperation(ctx, in.Shard, OpRejoin)
	if err != nil {
		return RejoinResult{}, err
	}
	defer end()
	p.step("inspecting shard %s", in.Shard)
	view, err := inspect(ctx, in.Shard)
	if err != nil {
		return RejoinResult{}, failed(err, "inspecting shard %s", in.Shard)
	}
	primary := view.State.Primary
	switch {
	case primary == "":
		return RejoinResult{}, activities.Refuse(pgerr.ObjectNotInPrerequisiteState, "shard %s records no primary; RepairShard adopts one", in.Shard)
	case primary == in.Instance:
		return RejoinResult{}, activities.Refuse(pgerr.InvalidParameterValue, "%s is the primary of shard %s", in.Instance, in.Shard)
	}
	iv, ok := view.Instance(in.Instance)
	if !ok || !iv.Reachable {
		return RejoinResult{}, activities.Refuse(pgerr.ObjectNotInPrerequisiteState, "%s has no reachable sidecar; start Rejoin when it is back", in.Instance)
	}
	res := RejoinResult{Primary: primary}
	if pv, _ := view.Instance(primary); iv.Role == store.RoleReplica && slices.Contains(pv.Streaming, in.Instance) {
		p.step("%s already streams from %s: nothing to do", in.Instance, primary)
		res.Steps = p.steps
		return res, nil
	}
	if err := rejoinAsReplica(ctx, p, in.Shard, in.Instance, primary, iv.Role == store.RolePrimary && !iv.Fenced); err != nil {
		return RejoinResult{}, failed(err, "rejoining %s to %s", in.Instance, primary)
	}
	p.step("restoring durability on %s", primary)
	names, err := applyDurability(ctx, in.Shard, primary)
	if err != nil {
		return RejoinResult{}, failed(err, "%s rejoined but the durability policy on %s is not restored", in.Instance, primary)
	}
	p.step("synchronous_standby_names on %s is %q", primary, names)
	res.Steps = p.steps
	return res, nil
}

// rejoinAsReplica fences instance when it may still take writes, rewinds
// it onto primary and waits until it streams from there.
func rejoinAsReplica(ctx workflow.Context, p *progress, shard, instance, primary string, mayWrite bool) error {
	if mayWrite {
		p.step("fencing %s, which still acts as a primary", instance)
		if _, err := fence(ctx, remote, normal, shard, instance); err != nil {
			return err
		}
	}
	p.step("rewinding %s onto %s", instance, primary)
	if err := rewind(ctx, shard, instance, primary); err != nil {
		return err
	}
	p.step("waiting for %s to stream from %s", instance, primary)
	return awaitStreaming(ctx, shard, instance, primary)
}
