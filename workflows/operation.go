package workflows

import (
	"slices"
	"time"

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
	// OpCutover is a data movement's SwitchTraffic or ReverseTraffic,
	// recorded on every shard it fences or buffers.
	OpCutover = "cutover"
)

// The record of an operation another one excludes (store.BeginOperation)
// is retried for a bounded time, then the operation is refused: a
// switchover waits for a cutover (seconds) about a minute; a cutover
// waits for a switchover about 8 s, and the operator asks again.
var (
	awaitCutover    = budget{10 * time.Second, 10}
	awaitSwitchover = budget{10 * time.Second, 5}
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
	b := normal
	if kind == OpSwitchover {
		b = awaitCutover
	}
	if err := workflow.ExecuteActivity(withSummary(b.ctx(ctx), "record the %s of shard %s", kind, shard), acts.BeginOperation, in).Get(ctx, nil); err != nil {
		return nil, failed(err, "recording the %s of shard %s", kind, shard)
	}
	return func() {
		// Even when the workflow is cancelled.
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		workflow.ExecuteActivity(withSummary(normal.ctx(dctx), "end the record of the %s of shard %s", kind, shard), acts.EndOperation, in).Get(dctx, nil)
	}, nil
}

// beginCutover records a cutover on every shard of its plan that is not
// an import's external source, unless a switchover or failover is
// recorded on one of them (then, after a bounded wait, it fails with
// SQLSTATE 55006 and nothing is recorded). again re-checks the records
// right before the point of no return, once: a failover that began since
// makes the cutover back off. end removes the records.
func beginCutover(ctx workflow.Context, plan ReshardPlan) (again func() error, end func(), err error) {
	in := activities.OperationInput{Kind: OpCutover}
	for _, s := range slices.Concat(plan.Sources, plan.Targets) {
		if s != ImportSourceShard {
			in.Shards = append(in.Shards, s)
		}
	}
	if err := workflow.ExecuteActivity(withSummary(awaitSwitchover.ctx(ctx), "record the cutover on %v", in.Shards), acts.BeginOperation, in).Get(ctx, nil); err != nil {
		return nil, nil, failed(err, "recording the cutover on %v", in.Shards)
	}
	again = func() error {
		once := budget{10 * time.Second, 1}
		if err := workflow.ExecuteActivity(withSummary(once.ctx(ctx), "check no switchover or failover began on %v", in.Shards), acts.BeginOperation, in).Get(ctx, nil); err != nil {
			return failed(err, "checking the cutover's shards before the topology switch")
		}
		return nil
	}
	end = func() {
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		workflow.ExecuteActivity(withSummary(normal.ctx(dctx), "end the record of the cutover on %v", in.Shards), acts.EndOperation, in).Get(dctx, nil)
	}
	return again, end, nil
}
