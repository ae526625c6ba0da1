package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/activities"
)

// Operation kinds, as recorded in etcd (store.Operation) and as admins
// check them against what they are about to start.
const (
	OpSwitchover = "switchover"
	OpFailover   = "failover"
	OpRepair     = "repair"
	OpRejoin     = "rejoin"
)

// beginOperation records that this workflow runs an operation of kind on
// shard, whatever id it was started under (a schedule's runs each have
// their own), and returns what removes the record; the caller defers it.
// It runs before anything else the operation does, so that an admin sees
// the operation before it touches the shard.
func beginOperation(ctx workflow.Context, shard, kind string) (end func(), err error) {
	// Workflows started before operations recorded themselves replay
	// without these steps.
	if workflow.GetVersion(ctx, "operation-record", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return func() {}, nil
	}
	in := activities.OperationInput{Shard: shard, Kind: kind}
	if err := workflow.ExecuteActivity(withSummary(normal.ctx(ctx), "record the %s of shard %s", kind, shard), acts.BeginOperation, in).Get(ctx, nil); err != nil {
		return nil, failed(err, "recording the %s of shard %s", kind, shard)
	}
	return func() {
		// Even when the workflow is cancelled.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		workflow.ExecuteActivity(withSummary(normal.ctx(dctx), "end the record of the %s of shard %s", kind, shard), acts.EndOperation, in).Get(dctx, nil)
	}, nil
}
