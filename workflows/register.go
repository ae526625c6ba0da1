package workflows

import (
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/activities"
)

// Register registers the workflows under their type names and a's
// activities under their method names, which read as steps in the
// Temporal UI ("FenceInstance", "PromoteInstance", "PublishPrimary").
func Register(r worker.Registry, a *activities.Activities) {
	r.RegisterWorkflowWithOptions(Failover, workflow.RegisterOptions{Name: FailoverName})
	r.RegisterWorkflowWithOptions(Switchover, workflow.RegisterOptions{Name: SwitchoverName})
	r.RegisterWorkflowWithOptions(SetDurability, workflow.RegisterOptions{Name: SetDurabilityName})
	r.RegisterWorkflowWithOptions(Rejoin, workflow.RegisterOptions{Name: RejoinName})
	r.RegisterWorkflowWithOptions(RepairShard, workflow.RegisterOptions{Name: RepairShardName})
	// Reshard's activities are the Replicator's (package
	// replicator/actions), registered by the worker beside these.
	r.RegisterWorkflowWithOptions(Reshard, workflow.RegisterOptions{Name: ReshardName})
	r.RegisterWorkflowWithOptions(MoveTables, workflow.RegisterOptions{Name: MoveTablesName})
	r.RegisterWorkflowWithOptions(VDiff, workflow.RegisterOptions{Name: VDiffName})
	// OnlineDDL's and SchemaCheck's activities are package onlineddl's,
	// registered by the worker too.
	r.RegisterWorkflowWithOptions(OnlineDDL, workflow.RegisterOptions{Name: OnlineDDLName})
	r.RegisterWorkflowWithOptions(SchemaCheck, workflow.RegisterOptions{Name: SchemaCheckName})
	r.RegisterWorkflowWithOptions(ResolvePrepared, workflow.RegisterOptions{Name: ResolvePreparedName})
	for name, fn := range map[string]any{
		"InspectShard":      a.InspectShard,
		"DrainTransactions": a.DrainTransactions,
		"FenceInstance":     a.FenceInstance,
		"UnfenceInstance":   a.UnfenceInstance,
		"PromoteInstance":   a.PromoteInstance,
		"FollowPrimary":     a.FollowPrimary,
		"RewindInstance":    a.RewindInstance,
		"WaitForReplay":     a.WaitForReplay,
		"AwaitStreaming":    a.AwaitStreaming,
		"PublishPrimary":    a.PublishPrimary,
		"SetBuffer":         a.SetBuffer,
		"ClearBuffer":       a.ClearBuffer,
		"StoreDurability":   a.StoreDurability,
		"ApplyDurability":   a.ApplyDurability,
		"BeginOperation":    a.BeginOperation,
		"EndOperation":      a.EndOperation,
		"ResolvePrepared":   a.ResolvePrepared,
	} {
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
}
