package actions

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/workflows"
)

// PlanReshard checks a reshard and returns its plan, changing nothing: the
// shard group exists and is not the authoritative one, the target key
// ranges cover the routing space exactly once (the topology's own
// validation of the group with them), the targets are other shards than
// the sources and each has a recorded primary, and every table of the
// group has a shard key, an order key and a replica identity the copy and
// stream can use, on every source. Each problem is a non-retryable error
// with its SQLSTATE.
func (a *Actions) PlanReshard(ctx context.Context, in workflows.PlanReshardInput) (workflows.ReshardPlan, error) {
	snap, err := a.Store.GetTopology(ctx)
	if err != nil {
		return workflows.ReshardPlan{}, activityError(err)
	}
	if snap == nil || snap.Topology == nil {
		return workflows.ReshardPlan{}, refuse(pgerr.ObjectNotInPrerequisiteState, "no topology is stored")
	}
	plan, err := planTopology(snap.Topology, in)
	if err != nil {
		return plan, err
	}
	plan.TopologyRevision = snap.Revision
	for _, shard := range plan.Targets {
		st, err := a.Store.GetShardState(ctx, shard)
		if err != nil {
			return plan, activityError(err)
		}
		if st.Primary == "" {
			return plan, refuse(pgerr.UndefinedObject, "target shard %s does not exist or has no primary: create it first", shard)
		}
	}
	if err := a.planTables(ctx, &plan, snap.Topology); err != nil {
		return plan, err
	}
	if err := a.estimateRows(ctx, &plan); err != nil {
		return plan, err
	}
	if plan.Queues, err = a.planQueues(ctx, plan); err != nil {
		return plan, err
	}
	// Before any slot: a promotion from now on is seen as a failover.
	if plan.Terms, err = a.shardTerms(ctx, plan.Sources); err != nil {
		return plan, err
	}
	return plan, nil
}

// planTopology checks the input against the stored topology and computes
// the target topology, the sources and the targets.
func planTopology(top *topo.Topology, in workflows.PlanReshardInput) (workflows.ReshardPlan, error) {
	r := in.Input
	plan := workflows.ReshardPlan{Key: workflows.ReshardKey(in.WorkflowID), Database: r.Database, ShardGroup: r.ShardGroup}
	if in.WorkflowID == "" || r.Database == "" || r.ShardGroup == "" || len(r.TargetKeyRanges) == 0 {
		return plan, refuse(pgerr.InvalidParameterValue, "database, shard_group and target_key_ranges are required")
	}
	if err := checkCopyBatchRows(r.CopyBatchRows); err != nil {
		return plan, err
	}
	plan.CopyBatchRows = r.CopyBatchRows
	group, ok := top.Group(r.ShardGroup)
	if !ok {
		return plan, refuse(pgerr.UndefinedObject, "shard group %q does not exist", r.ShardGroup)
	}
	if r.ShardGroup == top.AuthoritativeShardGroup {
		return plan, refuse(pgerr.FeatureNotSupported, "shard group %q is the authoritative group: resharding it is not supported", r.ShardGroup)
	}
	plan.Sources = group.Shards()
	for _, kr := range r.TargetKeyRanges {
		if slices.Contains(plan.Sources, kr.ShardUID) {
			return plan, refuse(pgerr.FeatureNotSupported, "target shard %s is a source of group %s: a target must be another shard", kr.ShardUID, r.ShardGroup)
		}
		if !slices.Contains(plan.Targets, kr.ShardUID) {
			plan.Targets = append(plan.Targets, kr.ShardUID)
		}
	}
	doc, err := targetTopology(top, r.ShardGroup, r.TargetKeyRanges)
	if err != nil {
		return plan, err
	}
	plan.TargetTopology = doc
	if plan.SourceTopology, err = json.Marshal(top); err != nil {
		return plan, activityError(err)
	}
	return plan, nil
}

// targetTopology is top with group's key ranges replaced: parsed, so that
// ranges that leave a gap or overlap are refused as the topology's own
// validation words it.
func targetTopology(top *topo.Topology, group string, ranges []workflows.KeyRangeInput) (json.RawMessage, error) {
	raw, err := json.Marshal(top)
	if err != nil {
		return nil, err
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		return nil, err
	}
	groups, _ := doc["shard_groups"].([]any)
	for _, g := range groups {
		if m, ok := g.(map[string]any); ok && m["uid"] == group {
			m["key_ranges"] = ranges
			// Replica reads switched ahead of the writes follow them
			// now: the writes' switch (or its reverse) moves both.
			delete(m, "replica_key_ranges")
		}
	}
	out, err := json.Marshal(doc)
	if err != nil {
		return nil, err
	}
	if _, err := topo.Parse(out); err != nil {
		return nil, refuse(pgerr.InvalidParameterValue, "target_key_ranges: %v", err)
	}
	return out, nil
}

// planTables lists the group's tables in the first source's catalogue
// (a table the topology does not name inherits a placement, so the
// topology alone does not list them), and describes each on every source.
func (a *Actions) planTables(ctx context.Context, plan *workflows.ReshardPlan, current *topo.Topology) error {
	target, err := topo.Parse(plan.TargetTopology)
	if err != nil {
		return activityError(err)
	}
	plan.Tables = nil
	for i, src := range plan.Sources {
		conn, _, err := a.connect(ctx, src, plan.Database)
		if err != nil {
			return err
		}
		err = func() error {
			defer closeAll(conn)
			if i == 0 {
				names, err := userTables(ctx, conn)
				if err != nil {
					return activityError(err)
				}
				for _, n := range names {
					p := current.Resolve(plan.Database, n[0], n[1])
					if p.IsReference() || p.Group == nil || p.Group.UID != plan.ShardGroup {
						continue
					}
					col := target.Resolve(plan.Database, n[0], n[1]).ShardColumn()
					if col == "" {
						return refuse(pgerr.ObjectNotInPrerequisiteState, "table %s.%s has no shard index in the target topology", n[0], n[1])
					}
					plan.Tables = append(plan.Tables, workflows.ReshardTable{Schema: n[0], Name: n[1], ShardColumn: col})
				}
			}
			for _, t := range plan.Tables {
				d, err := replicator.DescribeTable(ctx, conn, t.Schema, t.Name, t.ShardColumn)
				if err != nil {
					return activityError(fmt.Errorf("source %s: %w", src, err))
				}
				if err := replicator.CheckReplicaIdentity(ctx, conn, d); err != nil {
					return activityError(fmt.Errorf("source %s: %w", src, err))
				}
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	if len(plan.Tables) == 0 {
		return refuse(pgerr.ObjectNotInPrerequisiteState, "shard group %s has no tables in database %s on %s", plan.ShardGroup, plan.Database, plan.Sources[0])
	}
	return nil
}

// userTables lists ordinary tables outside the system schemas and
// Tessera's own, as (schema, name).
func userTables(ctx context.Context, conn *pgx.Conn) ([][2]string, error) {
	rows, err := conn.Query(ctx, `SELECT n.nspname, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE c.relkind = 'r' AND NOT c.relispartition
		  AND n.nspname NOT IN ('pg_catalog', 'information_schema', '_tessera') AND n.nspname NOT LIKE 'pg\_%'
		ORDER BY 1, 2`)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
		var n [2]string
		err := r.Scan(&n[0], &n[1])
		return n, err
	})
}
