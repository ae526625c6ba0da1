package e2e

import (
	"context"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/workflows"
)

// runVDiff runs the VDiff workflow on a movement, on the real Temporal
// server, and checks its report query agrees with its result.
func runVDiff(t *testing.T, ctx context.Context, queue, movement string) workflows.VDiffReport {
	t.Helper()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.VDiffID(movement), TaskQueue: queue},
		workflows.VDiffName, workflows.VDiffInput{WorkflowID: movement})
	if err != nil {
		t.Fatal(err)
	}
	var rep workflows.VDiffReport
	if err := run.Get(ctx, &rep); err != nil {
		t.Fatalf("VDiff of %s: %v", movement, err)
	}
	v, err := tc.QueryWorkflow(ctx, run.GetID(), run.GetRunID(), workflows.ReportQuery)
	var queried workflows.VDiffReport
	if err == nil {
		err = v.Get(&queried)
	}
	if err != nil || queried.Phase != rep.Phase || queried.Movement != movement {
		t.Fatalf("report query %+v, %v; result %+v", queried, err, rep)
	}
	return rep
}
