package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/tesseradb/tessera/topo/store"
)

// OperationInput names the operation a workflow runs on a shard.
type OperationInput struct {
	Shard string
	// Kind is "switchover", "failover", "repair" or "rejoin".
	Kind string
}

// BeginOperation records, in etcd, that the calling workflow runs an
// operation on the shard (store.Operation), so that admins see it
// whatever id it was started under. It is idempotent.
func (a *Activities) BeginOperation(ctx context.Context, in OperationInput) error {
	if in.Shard == "" || in.Kind == "" {
		return Refuse(invalidParameter, "shard and kind are required")
	}
	if err := a.requireShard(ctx, in.Shard); err != nil {
		return err
	}
	wf := activity.GetInfo(ctx).WorkflowExecution
	err := a.cfg.Store.BeginOperation(ctx, store.Operation{Shard: in.Shard, Kind: in.Kind, WorkflowID: wf.ID, RunID: wf.RunID, Since: time.Now()})
	if err != nil {
		return passOn(err)
	}
	return nil
}

// EndOperation removes the calling workflow's record. It is idempotent.
func (a *Activities) EndOperation(ctx context.Context, in OperationInput) error {
	wf := activity.GetInfo(ctx).WorkflowExecution
	if err := a.cfg.Store.EndOperation(ctx, in.Shard, wf.ID, wf.RunID); err != nil {
		return passOn(err)
	}
	return nil
}
