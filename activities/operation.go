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
	// Kind is "switchover", "failover", "repair", "rejoin" or "cutover".
	Kind string
	// Shards, when set, replaces Shard: a cutover records itself on
	// every shard it fences or buffers, all or none.
	Shards []string `json:",omitempty"`
}

func (in OperationInput) shards() []string {
	if len(in.Shards) > 0 {
		return in.Shards
	}
	return []string{in.Shard}
}

// BeginOperation records, in etcd, that the calling workflow runs an
// operation on the shard (store.Operation), so that admins see it
// whatever id it was started under. It is idempotent. An operation that
// another one on the shard excludes (a switchover during a cutover, a
// cutover during a switchover or failover: store.BeginOperation) fails
// with SQLSTATE 55006, retried: the workflow's retry policy bounds the
// wait.
func (a *Activities) BeginOperation(ctx context.Context, in OperationInput) error {
	if in.Kind == "" {
		return Refuse(invalidParameter, "shard and kind are required")
	}
	wf := activity.GetInfo(ctx).WorkflowExecution
	var ops []store.Operation
	for _, shard := range in.shards() {
		if err := a.requireShard(ctx, shard); err != nil {
			return err
		}
		ops = append(ops, store.Operation{Shard: shard, Kind: in.Kind, WorkflowID: wf.ID, RunID: wf.RunID, Since: time.Now()})
	}
	if err := a.cfg.Store.BeginOperations(ctx, ops); err != nil {
		return passOn(err)
	}
	return nil
}

// EndOperation removes the calling workflow's record. It is idempotent.
func (a *Activities) EndOperation(ctx context.Context, in OperationInput) error {
	wf := activity.GetInfo(ctx).WorkflowExecution
	for _, shard := range in.shards() {
		if err := a.cfg.Store.EndOperation(ctx, shard, wf.ID, wf.RunID); err != nil {
			return passOn(err)
		}
	}
	return nil
}
