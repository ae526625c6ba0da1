// Package launch starts and follows operations' workflows from outside
// Temporal: the command line, and the router for sessions that ask for
// online schema changes (tessera.ddl_strategy). It holds what both need,
// so that a migration started from psql queues and fails exactly as one
// started with `tessera onlineddl` does.
package launch

import (
	"context"
	"errors"
	"fmt"
	"io"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/ddl"
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/workflows"
)

// WorkflowError turns a workflow's failure into the error it carries,
// with its SQLSTATE: workflows fail with application errors whose type
// is the SQLSTATE.
func WorkflowError(id string, err error) error {
	if err == nil {
		return nil
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && len(appErr.Type()) == 5 {
		return pgerr.New(appErr.Type(), "%s failed: %s", id, appErr.Message())
	}
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) {
		return pgerr.New("57014", "%s timed out", id)
	}
	var terminated *temporal.TerminatedError
	if errors.As(err, &terminated) {
		return pgerr.New("57P01", "%s was terminated", id)
	}
	var canceled *temporal.CanceledError
	if errors.As(err, &canceled) {
		return pgerr.New("57014", "%s was canceled", id)
	}
	return fmt.Errorf("%s failed: %w", id, err)
}

// OnlineDDLID classifies a schema change and returns the id its migration
// runs under: one per table (or index), so that two migrations of the same
// table queue. A statement OnlineDDL does not take is refused with its
// reason.
func OnlineDDLID(database, sql string) (string, error) {
	c, err := ddl.Classify(sql, nil)
	if err != nil {
		return "", pgerr.New("42601", "%v", err)
	}
	object, schema := c.Table, c.Schema
	if object == "" {
		object, schema = c.Index, c.IndexSchema
	}
	if object == "" {
		return "", pgerr.New(pgerr.FeatureNotSupported, "refused: %s", c.Reason())
	}
	return workflows.OnlineDDLID(database, schema, object), nil
}

// StartOnlineDDL starts the migration of in under id, on queue. When
// another migration of the same table runs, with queue set it waits for
// that one to end and then starts (w hears why it waits); without, it
// refuses with SQLSTATE 55006.
func StartOnlineDDL(ctx context.Context, w io.Writer, c client.Client, id, queue string, in workflows.OnlineDDLInput, wait bool) (client.WorkflowRun, error) {
	for {
		run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
			ID: id, TaskQueue: queue, StaticSummary: in.Summary(),
			WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
			WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
			WorkflowExecutionErrorWhenAlreadyStarted: true,
		}, workflows.OnlineDDLName, in)
		var running *serviceerror.WorkflowExecutionAlreadyStarted
		if !errors.As(err, &running) {
			if err != nil {
				return nil, fmt.Errorf("starting workflow %s: %w", id, err)
			}
			fmt.Fprintf(w, "started migration %s (run %s)\n", id, run.GetRunID())
			return run, nil
		}
		if !wait {
			return nil, pgerr.New(pgerr.ObjectInUse, "another migration of this table runs (%s, run %s): wait for it to end", id, running.RunId)
		}
		fmt.Fprintf(w, "another migration of this table runs (%s, run %s): waiting for it to end\n", id, running.RunId)
		// Its outcome is its own; only its end matters here.
		_ = c.GetWorkflow(ctx, id, running.RunId).Get(ctx, nil)
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
}
