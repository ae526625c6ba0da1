package workflows

import (
	"fmt"
	"slices"

	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/store"
)

// RepairInput names the shard to repair.
type RepairInput struct {
	Shard string
}

// RepairResult lists what a repair did, or found that needs an operator;
// it is empty when the shard was in order.
type RepairResult struct {
	Actions []string
}

// RepairShard brings a shard back in line with its ShardState, the way a
// periodic health check would: it adopts the self-reported primary when
// none is recorded, fences any other instance that acts as a primary and
// rejoins it as a replica, repoints replicas that do not stream from the
// primary (rewinding those that cannot follow), and sets
// synchronous_standby_names as the policy requires. It changes nothing
// while the primary is fenced or the shard is buffered: a switchover or
// failover is under way and owns the shard.
func RepairShard(ctx workflow.Context, in RepairInput) (RepairResult, error) {
	p, err := track(ctx)
	if err != nil {
		return RepairResult{}, err
	}
	if in.Shard == "" {
		return RepairResult{}, activities.Refuse(pgerr.InvalidParameterValue, "a shard is required")
	}
	end, err := beginOperation(ctx, in.Shard, OpRepair)
	if err != nil {
		return RepairResult{}, err
	}
	defer end()
	var res RepairResult
	act := func(format string, args ...any) {
		p.step(format, args...)
		res.Actions = append(res.Actions, fmt.Sprintf(format, args...))
	}
	p.step("inspecting shard %s", in.Shard)
	view, err := inspect(ctx, in.Shard)
	if err != nil {
		return RepairResult{}, failed(err, "inspecting shard %s", in.Shard)
	}
	if view.State.Buffering(workflow.Now(ctx)) {
		p.step("shard %s is buffered for a %s: not repairing", in.Shard, view.State.Buffer.Reason)
		return res, nil
	}

	primary := view.State.Primary
	if primary == "" {
		reported := view.ReportedPrimaries()
		if len(reported) != 1 {
			act("shard %s records no primary and %d instances act as one: start Failover", in.Shard, len(reported))
			return res, nil
		}
		primary = reported[0]
		st, err := publish(ctx, remote, activities.PublishInput{Shard: in.Shard, Primary: primary})
		if err != nil {
			return res, failed(err, "adopting %s as the primary of shard %s", primary, in.Shard)
		}
		act("adopted %s, the instance acting as primary, as the primary of shard %s (term %d)", primary, in.Shard, st.Term)
	}
	pv, _ := view.Instance(primary)
	switch {
	case !pv.Serving || pv.Role != store.RolePrimary:
		act("the primary %s of shard %s is not serving as a primary: start Failover", primary, in.Shard)
		return res, nil
	case pv.Fenced:
		p.step("the primary %s is fenced (a switchover or failover under way?): not repairing", primary)
		return res, nil
	}

	for _, iv := range view.Instances {
		switch {
		case iv.ID == primary:
		case !iv.Reachable || !iv.Serving:
			p.step("%s is not serving; skipped", iv.ID)
		case iv.Role == store.RolePrimary:
			if err := rejoinAsReplica(ctx, p, in.Shard, iv.ID, primary, !iv.Fenced); err != nil {
				return res, failed(err, "rejoining %s, which acted as a primary, to %s", iv.ID, primary)
			}
			act("fenced %s, which acted as a primary, and rejoined it as a replica of %s", iv.ID, primary)
		case !slices.Contains(pv.Streaming, iv.ID):
			how, err := reattach(ctx, p, in.Shard, iv.ID, primary)
			if err != nil {
				return res, failed(err, "reattaching %s to %s", iv.ID, primary)
			}
			act("%s %s, which was not streaming from %s", how, iv.ID, primary)
		}
	}

	want := activities.SynchronousStandbyNames(view.State.Durability, primary, view.Members())
	if pv.SynchronousStandbyNames != want {
		names, err := applyDurability(ctx, in.Shard, primary)
		if err != nil {
			return res, failed(err, "setting synchronous_standby_names on %s", primary)
		}
		act("set synchronous_standby_names on %s from %q to %q (%s)", primary, pv.SynchronousStandbyNames, names, view.State.Durability.OrDefault())
	}
	return res, nil
}

// reattach makes a replica stream from primary: repointing is enough
// unless it replayed past the point where primary's timeline forked, and
// then it is rewound. It says which it took.
func reattach(ctx workflow.Context, p *progress, shard, instance, primary string) (string, error) {
	p.step("pointing %s at %s", instance, primary)
	err := follow(ctx, remote, shard, instance, primary)
	if err == nil {
		p.step("waiting for %s to stream from %s", instance, primary)
		if err = awaitStreaming(ctx, shard, instance, primary); err == nil {
			return "repointed", nil
		}
	}
	p.step("%s cannot follow %s (%s); rewinding it", instance, primary, errText(err))
	if err := rejoinAsReplica(ctx, p, shard, instance, primary, false); err != nil {
		return "", err
	}
	return "rewound", nil
}
