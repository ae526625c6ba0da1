package admin

import (
	"context"
	"errors"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/workflows"
)

// temporalStarter starts the admin's workflows on a Temporal client.
type temporalStarter struct{ c client.Client }

// NewTemporalStarter returns a Starter that starts workflows through c.
// Every workflow gets its fixed id (workflows.FailoverID and the like):
// a start while one with that id runs attaches to the running one, and a
// start after it closed runs anew.
func NewTemporalStarter(c client.Client) Starter { return temporalStarter{c: c} }

func (s temporalStarter) start(ctx context.Context, id, workflow string, input any) error {
	_, err := s.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                workflows.TaskQueue,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_USE_EXISTING,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
	}, workflow, input)
	return err
}

func (s temporalStarter) Failover(ctx context.Context, shard, reason string) error {
	return s.start(ctx, workflows.FailoverID(shard), workflows.FailoverName, workflows.FailoverInput{Shard: shard, Reason: reason})
}

func (s temporalStarter) Rejoin(ctx context.Context, shard, instance string) error {
	return s.start(ctx, workflows.RejoinID(instance), workflows.RejoinName, workflows.RejoinInput{Shard: shard, Instance: instance})
}

func (s temporalStarter) Repair(ctx context.Context, shard string) error {
	return s.start(ctx, workflows.RepairID(shard), workflows.RepairShardName, workflows.RepairInput{Shard: shard})
}

// Busy asks Temporal which of the shard's per-shard workflows run.
func (s temporalStarter) Busy(ctx context.Context, shard string) ([]string, error) {
	var out []string
	for op, id := range map[string]string{
		string(ActFailover): workflows.FailoverID(shard),
		"switchover":        workflows.SwitchoverID(shard),
		string(ActRepair):   workflows.RepairID(shard),
	} {
		d, err := s.c.DescribeWorkflowExecution(ctx, id, "")
		var notFound *serviceerror.NotFound
		switch {
		case errors.As(err, &notFound):
		case err != nil:
			return nil, err
		case d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			out = append(out, op)
		}
	}
	return out, nil
}
