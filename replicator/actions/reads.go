package actions

import (
	"context"
	"encoding/json"
	"slices"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// SwitchReplicaReads is a reads-first SwitchTraffic's topology change, or
// its undo: it sets the group's replica key ranges to the targets' (On)
// or removes them (a MoveTables' plan: its tables' replica_reads bindings,
// switchTableReads), so that replica sessions' statements on the group's
// tables route to the targets' replicas while primary reads and writes
// stay on the sources. Like SwitchTopology it is a compare-and-swap on
// the revision it reads, forced past the placement guard (which refuses
// a change of replica key ranges to anyone else), and only while the
// group's key ranges are still the sources': once writes are switched
// there is nothing to switch for reads. A retry that finds the change
// made returns the stored revision.
//
// Replica reads never fall back to a primary, so switching them on is
// refused (55000) while a target has no live replica sidecar.
func (a *Actions) SwitchReplicaReads(ctx context.Context, in workflows.ReadsInput) (workflows.SwitchTopologyResult, error) {
	plan := in.Plan
	if plan.Imports() {
		return workflows.SwitchTopologyResult{}, refuse(pgerr.FeatureNotSupported, "an import's source has no replicas the routers know: it switches reads and writes together")
	}
	if plan.MovesTables() {
		return a.switchTableReads(ctx, in)
	}
	snap, err := a.Store.GetTopology(ctx)
	if err != nil {
		return workflows.SwitchTopologyResult{}, activityError(err)
	}
	current, ok := snap.Topology.Group(plan.ShardGroup)
	if !ok {
		return workflows.SwitchTopologyResult{}, refuse(pgerr.UndefinedObject, "shard group %s is no longer in the topology", plan.ShardGroup)
	}
	sources, err := groupRanges(plan.SourceTopology, plan.ShardGroup)
	if err != nil {
		return workflows.SwitchTopologyResult{}, err
	}
	if !sameRanges(current.KeyRanges, sources) {
		return workflows.SwitchTopologyResult{}, refuse(pgerr.ObjectNotInPrerequisiteState,
			"shard group %s's key ranges are not the reshard's sources' (its writes are switched, or the group changed): replica reads are not switched apart", plan.ShardGroup)
	}
	var want []topo.KeyRange
	if in.On {
		if want, err = groupRanges(plan.TargetTopology, plan.ShardGroup); err != nil {
			return workflows.SwitchTopologyResult{}, err
		}
	}
	if sameRanges(current.ReplicaKeyRanges, want) {
		return workflows.SwitchTopologyResult{Revision: snap.Revision}, nil
	}
	if in.On {
		if err := a.replicasServe(ctx, plan.Targets); err != nil {
			return workflows.SwitchTopologyResult{}, err
		}
	}
	doc, err := withReplicaRanges(snap.Topology, plan.ShardGroup, want)
	if err != nil {
		return workflows.SwitchTopologyResult{}, activityError(err)
	}
	next, err := topo.Parse(doc)
	if err != nil {
		return workflows.SwitchTopologyResult{}, activityError(err)
	}
	return a.applySwitch(ctx, next, snap.Revision)
}

// replicasServe refuses unless every shard has a live replica: a sidecar
// whose discovery record (kept only while its lease lives) names the
// shard and an instance other than the shard's recorded primary.
func (a *Actions) replicasServe(ctx context.Context, shards []string) error {
	recs, err := a.Store.ListRecords(ctx, store.KindSidecar)
	if err != nil {
		return activityError(err)
	}
	for _, shard := range shards {
		st, err := a.Store.GetShardState(ctx, shard)
		if err != nil {
			return activityError(err)
		}
		if !slices.ContainsFunc(recs, func(r store.Record) bool {
			if r.ShardUID != shard {
				return false
			}
			if st.Primary != "" {
				return r.InstanceID != st.Primary
			}
			return r.Role == store.RoleReplica
		}) {
			return refuse(pgerr.ObjectNotInPrerequisiteState,
				"target shard %s has no replica serving, and replica reads never fall back to a primary: add a replica, or switch writes (which moves reads too)", shard)
		}
	}
	return nil
}

// withReplicaRanges is top with group's replica key ranges set to
// ranges, or removed when ranges is empty.
func withReplicaRanges(top *topo.Topology, group string, ranges []topo.KeyRange) ([]byte, error) {
	raw, err := json.Marshal(top)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	inputs := make([]workflows.KeyRangeInput, len(ranges))
	for i, r := range ranges {
		inputs[i] = workflows.KeyRangeInput{ShardUID: r.ShardUID, Start: r.Start, End: r.End}
	}
	groups, _ := doc["shard_groups"].([]any)
	for _, g := range groups {
		if m, ok := g.(map[string]any); ok && m["uid"] == group {
			if len(inputs) == 0 {
				delete(m, "replica_key_ranges")
			} else {
				m["replica_key_ranges"] = inputs
			}
		}
	}
	return json.Marshal(doc)
}
