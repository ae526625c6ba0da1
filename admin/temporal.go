package admin

import (
	"context"
	"errors"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// temporalStarter starts the admin's workflows on a Temporal client and
// tells which operations run on a shard.
type temporalStarter struct {
	c  client.Client
	st *store.Store
	// running reports whether a workflow run is running (runID "" means
	// the latest run of id); Temporal's DescribeWorkflowExecution.
	running func(ctx context.Context, id, runID string) (bool, error)
}

// NewTemporalStarter returns a Starter that starts workflows through c.
// Every workflow gets its fixed id (workflows.FailoverID and the like):
// a start while one with that id runs attaches to the running one, and a
// start after it closed runs anew. Which operations run on a shard it
// reads from the operation records in st (store.Operation), which every
// operation workflow writes whatever id it runs under.
func NewTemporalStarter(c client.Client, st *store.Store) Starter {
	s := temporalStarter{c: c, st: st}
	s.running = s.describe
	return s
}

// start starts a workflow; input's Summary is the line the Temporal UI
// lists the run with.
func (s temporalStarter) start(ctx context.Context, id, workflow string, input interface{ Summary() string }) error {
	_, err := s.c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                       id,
		TaskQueue:                workflows.TaskQueue,
		StaticSummary:            input.Summary(),
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

// Busy lists the operations running on the shard: those recorded in etcd
// by their workflows, whatever started them (an operator, an admin, a
// schedule, whose runs have ids of their own), and, for the moment
// between a start and a workflow's first step, those running under the
// shard's fixed ids. A record whose run is over (its workflow was
// terminated before it could remove it) is removed.
func (s temporalStarter) Busy(ctx context.Context, shard string) ([]string, error) {
	var out []string
	ops, err := s.st.ListOperations(ctx, shard)
	if err != nil {
		return nil, err
	}
	for _, op := range ops {
		running, err := s.running(ctx, op.WorkflowID, op.RunID)
		if err != nil {
			return nil, err
		}
		if running {
			out = append(out, op.Kind)
		} else if err := s.st.DeleteOperation(ctx, op); err != nil {
			return nil, err
		}
	}
	for op, id := range map[string]string{
		workflows.OpFailover:   workflows.FailoverID(shard),
		workflows.OpSwitchover: workflows.SwitchoverID(shard),
		workflows.OpRepair:     workflows.RepairID(shard),
	} {
		running, err := s.running(ctx, id, "")
		if err != nil {
			return nil, err
		}
		if running {
			out = append(out, op)
		}
	}
	return out, nil
}

// describe asks Temporal whether a workflow run is running.
func (s temporalStarter) describe(ctx context.Context, id, runID string) (bool, error) {
	d, err := s.c.DescribeWorkflowExecution(ctx, id, runID)
	var notFound *serviceerror.NotFound
	switch {
	case errors.As(err, &notFound):
		return false, nil
	case err != nil:
		return false, err
	}
	return d.GetWorkflowExecutionInfo().GetStatus() == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING, nil
}
