package actions

import (
	"context"
	"slices"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// planQueues finds, for each source and target of the plan, a Replicator
// registered beside it (store.KindReplicator): the workflow runs that
// shard's CopyTables and StreamChanges on its task queue. A shard without
// one is left out, and its activities run on the workflow's own queue.
// Decided once, at the plan: a replicator that stops later holds its
// shard's activities until it (or another for that shard) polls again.
func (a *Actions) planQueues(ctx context.Context, plan workflows.ReshardPlan) (map[string]string, error) {
	recs, err := a.Store.ListRecords(ctx, store.KindReplicator)
	if err != nil {
		return nil, activityError(err)
	}
	var queues map[string]string
	for _, r := range recs {
		if slices.Contains(plan.Sources, r.ShardUID) || slices.Contains(plan.Targets, r.ShardUID) {
			if queues == nil {
				queues = map[string]string{}
			}
			queues[r.ShardUID] = workflows.ReplicatorQueue(r.ShardUID)
		}
	}
	return queues, nil
}

// RegisterSource registers, for a Replicator beside shard's primary, the
// activities that read that one shard as a source: CopyTables and
// StreamChanges. Everything else (the plan, the lag, the VDiff, the
// cutover, the cleanup) acts on the whole plan and stays with the general
// workers. An activity for another shard is refused: it was routed to the
// wrong queue.
func (a *Actions) RegisterSource(r worker.ActivityRegistry, shard string) {
	r.RegisterActivityWithOptions(func(ctx context.Context, in workflows.SourceInput) (workflows.CopyTablesResult, error) {
		if err := onShard(in, shard); err != nil {
			return workflows.CopyTablesResult{}, err
		}
		return a.CopyTables(ctx, in)
	}, activity.RegisterOptions{Name: workflows.CopyTablesActivity})
	r.RegisterActivityWithOptions(func(ctx context.Context, in workflows.SourceInput) error {
		if err := onShard(in, shard); err != nil {
			return err
		}
		return a.StreamChanges(ctx, in)
	}, activity.RegisterOptions{Name: workflows.StreamChangesActivity})
}

func onShard(in workflows.SourceInput, shard string) error {
	if in.Source != shard {
		return refuse(pgerr.InternalError, "the replicator of shard %s was given source %s: the task was routed to the wrong queue", shard, in.Source)
	}
	return nil
}
