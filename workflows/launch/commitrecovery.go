package launch

import (
	"context"
	"errors"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/workflows"
)

// EnsureCommitRecoverySchedule creates the schedule that runs
// ResolvePrepared every workflows.CommitRecoveryInterval, unless it
// exists. Workers call it when they start; a missed run is skipped, not
// caught up, and runs do not overlap.
func EnsureCommitRecoverySchedule(ctx context.Context, c client.Client, queue string) error {
	if queue == "" {
		queue = workflows.TaskQueue
	}
	_, err := c.ScheduleClient().Create(ctx, client.ScheduleOptions{
		ID: workflows.ResolvePreparedScheduleID,
		Spec: client.ScheduleSpec{
			Intervals: []client.ScheduleIntervalSpec{{Every: workflows.CommitRecoveryInterval}},
		},
		Overlap: enumspb.SCHEDULE_OVERLAP_POLICY_SKIP,
		Action: &client.ScheduleWorkflowAction{
			ID:        workflows.ResolvePreparedID,
			Workflow:  workflows.ResolvePreparedName,
			Args:      []any{workflows.DefaultResolvePreparedInput()},
			TaskQueue: queue,
		},
	})
	if errors.Is(err, temporal.ErrScheduleAlreadyRunning) {
		return nil
	}
	return err
}

// StartCommitRecovery starts a recovery pass now, or joins the one
// running.
func StartCommitRecovery(ctx context.Context, c client.Client, queue string) (client.WorkflowRun, error) {
	if queue == "" {
		queue = workflows.TaskQueue
	}
	return c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       workflows.ResolvePreparedID,
		TaskQueue:                queue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}, workflows.ResolvePreparedName, workflows.DefaultResolvePreparedInput())
}

// StartCommitRecovery starts a recovery pass for the router, which calls
// it when it lost a participant mid-commit (router.Config.CommitRecovery).
func (r *RouterOnlineDDL) StartCommitRecovery(ctx context.Context) error {
	c, err := r.client(ctx)
	if err != nil {
		return err
	}
	_, err = StartCommitRecovery(ctx, c, r.Queue)
	return err
}
