package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/workflows"
)

// workflowMetadataQuery is the query every Go SDK workflow answers with
// its current details (what the Temporal UI shows on the run's page).
const workflowMetadataQuery = "__temporal_workflow_metadata"

func newWorkflowCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Look at Tessera's workflows on Temporal",
	}
	cmd.AddCommand(newWorkflowShowCommand())
	return cmd
}

// workflowView is `tessera workflow show --json`.
type workflowView struct {
	ID             string `json:"id"`
	RunID          string `json:"run_id"`
	Type           string `json:"type"`
	Status         string `json:"status"`
	TaskQueue      string `json:"task_queue"`
	Started        string `json:"started"`
	Closed         string `json:"closed,omitempty"`
	Phase          string `json:"phase,omitempty"`
	Summary        string `json:"summary,omitempty"`
	CurrentDetails string `json:"current_details,omitempty"`
	Step           string `json:"step,omitempty"`
	// Progress is a Reshard's progress query answer.
	Progress *workflows.ReshardProgress `json:"progress,omitempty"`
	// VDiff is a VDiff's report: its query's answer, or its result once
	// it has completed.
	VDiff *workflows.VDiffReport `json:"vdiff,omitempty"`
	// progressLine is the progress with the running activities' heartbeats.
	progressLine string
	Pending      []string `json:"pending_activities,omitempty"`
}

func newWorkflowShowCommand() *cobra.Command {
	var tf temporalFlags
	var runID string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID [--run RUN_ID] [--json]",
		Short: "Show where one workflow stands: type, status, phase, summary, current details, progress",
		Long: `Show one workflow run (the latest of the id unless --run is given): its type
and status, its TesseraPhase, the summary it was started with, the current
details it keeps up to date (as the Temporal UI shows them), its pending
activities and, while it runs, its step query's answer or, for a Reshard, its
progress (rows copied, streams' lag, last VDiff).`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := tf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			v, err := describeWorkflow(ctx, c, args[0], runID)
			if err != nil {
				return workflowError(args[0], notFound(args[0], err))
			}
			return printResult(cmd.OutOrStdout(), asJSON, v, printWorkflowView)
		},
	}
	tf.register(cmd, nil)
	cmd.Flags().StringVar(&runID, "run", "", "the run id (default: the latest run)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

// describeWorkflow gathers what Temporal and, while the run lives, the
// workflow's own queries say about a run.
func describeWorkflow(ctx context.Context, c client.Client, id, runID string) (workflowView, error) {
	d, err := c.DescribeWorkflow(ctx, id, runID)
	if err != nil {
		return workflowView{}, err
	}
	v := workflowView{
		ID: id, RunID: d.WorkflowExecution.RunID, Type: d.WorkflowType.Name, TaskQueue: d.TaskQueueName,
		Status:  strings.ToLower(strings.TrimPrefix(d.Status.String(), "WORKFLOW_EXECUTION_STATUS_")),
		Started: d.WorkflowStartTime.UTC().Format(time.RFC3339),
	}
	if d.WorkflowCloseTime != nil {
		v.Closed = d.WorkflowCloseTime.UTC().Format(time.RFC3339)
	}
	v.Phase, _ = d.TypedSearchAttributes.GetKeyword(temporal.NewSearchAttributeKeyKeyword(workflows.PhaseAttribute))
	if v.Summary, err = d.GetStaticSummary(); err != nil {
		return v, err
	}
	if raw, err := c.DescribeWorkflowExecution(ctx, id, v.RunID); err == nil {
		for _, a := range raw.GetPendingActivities() {
			p := fmt.Sprintf("%s (attempt %d)", a.GetActivityType().GetName(), a.GetAttempt())
			if f := a.GetLastFailure(); f != nil {
				p += ": last failure: " + f.GetMessage()
			}
			v.Pending = append(v.Pending, p)
		}
	}
	if d.Status == enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED && v.Type == workflows.VDiffName {
		// The report is the run's result, which Temporal keeps.
		var rep workflows.VDiffReport
		if c.GetWorkflow(ctx, id, v.RunID).Get(ctx, &rep) == nil {
			v.VDiff, v.progressLine = &rep, vdiffSummary(rep)
		}
	}
	if d.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		// Queries of a closed run need a worker to replay it: what
		// Temporal holds is enough.
		return v, nil
	}
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	if res, err := c.QueryWorkflow(qctx, id, v.RunID, workflowMetadataQuery); err == nil {
		var md sdkpb.WorkflowMetadata
		if res.Get(&md) == nil {
			v.CurrentDetails = md.GetCurrentDetails()
		}
	}
	if v.Type == workflows.ReshardName || v.Type == workflows.MoveTablesName {
		if p, err := reshardProgress(qctx, c, id, v.RunID); err == nil {
			v.Progress, v.progressLine = &p.ReshardProgress, p.line()
		}
	} else if v.Type == workflows.VDiffName {
		if res, err := c.QueryWorkflow(qctx, id, v.RunID, workflows.ReportQuery); err == nil {
			var rep workflows.VDiffReport
			if res.Get(&rep) == nil {
				v.VDiff, v.progressLine = &rep, vdiffLine(ctx, c, id, rep.Movement)
			}
		}
	} else if res, err := c.QueryWorkflow(qctx, id, v.RunID, workflows.StepQuery); err == nil {
		res.Get(&v.Step)
	}
	return v, nil
}

func printWorkflowView(w io.Writer, v workflowView) {
	row := func(name, value string) {
		if value != "" {
			fmt.Fprintf(w, "%-10s %s\n", name+":", value)
		}
	}
	row("workflow", v.ID)
	row("run", v.RunID)
	row("type", v.Type)
	row("status", v.Status)
	row("started", v.Started)
	row("closed", v.Closed)
	row("phase", v.Phase)
	row("summary", v.Summary)
	row("step", v.Step)
	row("progress", v.progressLine)
	for _, p := range v.Pending {
		row("pending", p)
	}
	if v.CurrentDetails != "" {
		fmt.Fprintf(w, "\n%s", v.CurrentDetails)
	}
}

// vdiffSummary is a finished VDiff's one line.
func vdiffSummary(rep workflows.VDiffReport) string {
	s := "phase " + rep.Phase + " | movement " + rep.Movement
	if rep.Result != nil {
		s += " | " + diffProgress(rep.Result)
	}
	if rep.Error != "" {
		s += " | error: " + rep.Error
	}
	return s
}
