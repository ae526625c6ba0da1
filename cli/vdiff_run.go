package cli

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/workflows"
)

// runningMovement is the workflow id of the running movement of a
// database's shard group: its reshard, else a MoveTables into it.
func runningMovement(ctx context.Context, c client.Client, database, group string) (string, error) {
	ids := []string{workflows.ReshardID(database, group), workflows.MoveTablesID(database, group)}
	for _, id := range ids {
		d, err := c.DescribeWorkflow(ctx, id, "")
		var nf *serviceerror.NotFound
		switch {
		case errors.As(err, &nf):
			continue
		case err != nil:
			return "", err
		case d.Status == enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
			return id, nil
		}
	}
	return "", pgerr.New(pgerr.UndefinedObject, "neither %s nor %s is running", ids[0], ids[1])
}

// runVDiff starts the VDiff workflow on the group's movement, shows its
// progress and returns its report.
func runVDiff(ctx context.Context, w io.Writer, line *liveLine, c client.Client, queue, database, group string) (workflows.VDiffReport, error) {
	var rep workflows.VDiffReport
	movement, err := runningMovement(ctx, c, database, group)
	if err != nil {
		return rep, err
	}
	in := workflows.VDiffInput{WorkflowID: movement}
	run, err := startOp(ctx, w, c, workflows.VDiffID(movement), queue, workflows.VDiffName, in)
	if err != nil {
		return rep, err
	}
	defer line.done()
	ended := make(chan error, 1)
	go func() { ended <- run.Get(ctx, &rep) }()
	for {
		line.show(vdiffLine(ctx, c, run.GetID(), movement))
		select {
		case err := <-ended:
			line.done()
			return rep, workflowError(run.GetID(), err)
		case <-ctx.Done():
			return rep, ctx.Err()
		case <-time.After(progressPoll):
		}
	}
}

// vdiffLine is a running VDiff's one-line progress: its phase and the
// movement's DiffTables heartbeat (tables and chunks done, differences
// so far).
func vdiffLine(ctx context.Context, c client.Client, id, movement string) string {
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	var rep workflows.VDiffReport
	v, err := c.QueryWorkflow(qctx, id, "", workflows.ReportQuery)
	if err != nil || v.Get(&rep) != nil {
		return "starting"
	}
	s := "phase " + rep.Phase
	if rep.Result != nil {
		return s + " | " + diffProgress(rep.Result)
	}
	if p, err := reshardProgress(qctx, c, movement, ""); err == nil && p.diffing != nil {
		s += " | " + diffProgress(p.diffing)
	}
	return s
}

// diffProgress sums a VDiff's reports up: tables done, chunks compared,
// differences.
func diffProgress(d *workflows.DiffTablesResult) string {
	if len(d.Reports) == 0 {
		return "taking the consistent point (the streams stop first)"
	}
	var done, chunks int64
	for _, raw := range d.Reports {
		var r replicator.DiffReport
		if json.Unmarshal(raw, &r) != nil {
			continue
		}
		chunks += r.Chunks
		if r.Done {
			done++
		}
	}
	return fmt.Sprintf("tables %d done of %d started | chunks %d | differences %d", done, len(d.Reports), chunks, d.Differences)
}

// printVDiffReport prints a VDiff workflow's report table by table.
func printVDiffReport(w io.Writer, id string, rep workflows.VDiffReport) error {
	dir := "sources against targets"
	if rep.Reverse {
		dir = "reverse: the targets, serving, against the sources"
	}
	fmt.Fprintf(w, "%s: VDiff of %s (%s)\n", id, rep.Movement, dir)
	return printDiff(w, rep.Movement, workflows.ReshardProgress{Phase: rep.MovementPhase, LastDiff: rep.Result})
}
