package actions

import (
	"context"
	"encoding/json"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/workflows"
)

// switchTableReads is SwitchReplicaReads for a MoveTables' plan: each of
// its tables gets, in the stored topology, a replica_reads binding that
// places it as the target topology does (On), or loses it. A table that
// inherits its placement gets an entry of its own that keeps it where it
// is; switching off gives it back the entry the plan read (none: it
// inherits again). Only while every table's placement is still the
// source topology's: once writes are switched, switchTables' entries,
// which have no replica_reads, moved replica reads with them.
func (a *Actions) switchTableReads(ctx context.Context, in workflows.ReadsInput) (workflows.SwitchTopologyResult, error) {
	plan := in.Plan
	snap, err := a.Store.GetTopology(ctx)
	if err != nil {
		return workflows.SwitchTopologyResult{}, activityError(err)
	}
	before, err := topo.Parse(plan.SourceTopology)
	if err != nil {
		return workflows.SwitchTopologyResult{}, activityError(err)
	}
	after, err := topo.Parse(plan.TargetTopology)
	if err != nil {
		return workflows.SwitchTopologyResult{}, activityError(err)
	}
	want := before
	if in.On {
		want = after
	}
	done := true
	for _, t := range plan.Tables {
		if snap.Topology.Resolve(plan.Database, t.Schema, t.Name).Describe() != before.Resolve(plan.Database, t.Schema, t.Name).Describe() {
			return workflows.SwitchTopologyResult{}, refuse(pgerr.ObjectNotInPrerequisiteState,
				"table %s is no longer placed as MoveTables planned (its writes are switched, or the topology changed): replica reads are not switched apart", t.DisplayName())
		}
		done = done && snap.Topology.ReplicaReads().Resolve(plan.Database, t.Schema, t.Name).Describe() == want.Resolve(plan.Database, t.Schema, t.Name).Describe()
	}
	if done {
		return workflows.SwitchTopologyResult{Revision: snap.Revision}, nil
	}
	if in.On {
		if err := a.replicasServe(ctx, plan.Targets); err != nil {
			return workflows.SwitchTopologyResult{}, err
		}
	}
	stored, err := json.Marshal(snap.Topology)
	if err != nil {
		return workflows.SwitchTopologyResult{}, activityError(err)
	}
	entries := map[[2]string]any{}
	for _, t := range plan.Tables {
		entry, err := tableEntry(plan.SourceTopology, plan.Database, t.Schema, t.Name)
		if err != nil {
			return workflows.SwitchTopologyResult{}, err
		}
		if in.On {
			if entry, err = tableEntry(stored, plan.Database, t.Schema, t.Name); err != nil {
				return workflows.SwitchTopologyResult{}, err
			}
			own, ok := entry.(map[string]any)
			if !ok {
				own = binding(before.Resolve(plan.Database, t.Schema, t.Name))
			}
			target, err := tableEntry(plan.TargetTopology, plan.Database, t.Schema, t.Name)
			if err != nil {
				return workflows.SwitchTopologyResult{}, err
			}
			if target == nil {
				target = binding(after.Resolve(plan.Database, t.Schema, t.Name))
			}
			own["replica_reads"] = target
			entry = own
		}
		entries[[2]string{t.Schema, t.Name}] = entry
	}
	doc, err := placeTables(snap.Topology, plan.Database, entries, nil)
	if err != nil {
		return workflows.SwitchTopologyResult{}, err
	}
	next, err := topo.Parse(doc)
	if err != nil {
		return workflows.SwitchTopologyResult{}, activityError(err)
	}
	for _, t := range plan.Tables {
		if next.ReplicaReads().Resolve(plan.Database, t.Schema, t.Name).Describe() != want.Resolve(plan.Database, t.Schema, t.Name).Describe() ||
			next.Resolve(plan.Database, t.Schema, t.Name).Describe() != before.Resolve(plan.Database, t.Schema, t.Name).Describe() {
			return workflows.SwitchTopologyResult{}, refuse(pgerr.ObjectNotInPrerequisiteState,
				"the stored topology changed since MoveTables planned: table %s's reads would not land where planned; nothing is switched", t.DisplayName())
		}
	}
	return a.applySwitch(ctx, next, snap.Revision)
}

// binding is a table entry that gives a table placement p.
func binding(p *topo.Placement) map[string]any {
	b := map[string]any{}
	if p.Group != nil {
		b["shard_group"] = p.Group.UID
	}
	if p.Index != nil {
		b["shard_index"] = p.Index.Name
	}
	var alts []string
	for _, ix := range p.Alternates {
		alts = append(alts, ix.Name)
	}
	if alts != nil {
		b["alternate_shard_indexes"] = alts
	}
	return b
}
