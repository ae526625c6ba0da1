package workflows

import (
	"fmt"
	"strings"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/pgerr"
)

// VDiff asks a running data movement for a VDiff and returns its report.
// The movement does the work (reshard_vdiff.go): it owns the streams,
// which it stops at a known point for the diff and starts again after;
// its DiffTables activity heartbeats each table's report, which is where
// `tessera vdiff --run` reads the live progress, and a retried attempt
// goes on from the last chunk compared. Queries: ReportQuery, StepQuery.
func VDiff(ctx workflow.Context, in VDiffInput) (VDiffReport, error) {
	p, err := track(ctx)
	if err != nil {
		return VDiffReport{}, err
	}
	rep := VDiffReport{Phase: PhaseRequesting}
	if err := workflow.SetQueryHandler(ctx, ReportQuery, func() (VDiffReport, error) { return rep, nil }); err != nil {
		return rep, err
	}
	p.details = func(step string) string { return vdiffDetails(in.Summary(), rep, step) }
	enter := func(phase string) {
		rep.Phase = phase
		upsertPhase(ctx, phase)
		p.show()
	}
	fail := func(code, format string, args ...any) (VDiffReport, error) {
		rep.Error = fmt.Sprintf(format, args...)
		enter(PhaseFailed)
		p.step("failed: %s", rep.Error)
		return rep, temporal.NewNonRetryableApplicationError(rep.Error, code, nil)
	}
	enter(PhaseRequesting)
	if in.WorkflowID == "" && (in.Database == "" || in.ShardGroup == "") {
		return fail(pgerr.InvalidParameterValue, "a VDiff needs workflow_id, or database and shard_group")
	}

	self := workflow.GetInfo(ctx).WorkflowExecution
	req := VDiffRequest{WorkflowID: self.ID, RunID: self.RunID}
	var tried []string
	for _, id := range in.candidates() {
		// The latest run of id: a movement that waits long continues as
		// new. Temporal refuses the signal when no such workflow runs.
		err := workflow.SignalExternalWorkflow(ctx, id, "", VDiffRequestSignal, req).Get(ctx, nil)
		if err == nil {
			rep.Movement = id
			break
		}
		tried = append(tried, fmt.Sprintf("%s (%s)", id, errText(err)))
	}
	if rep.Movement == "" {
		return fail(pgerr.UndefinedObject, "no movement to diff is running: tried %s", strings.Join(tried, ", "))
	}
	enter(PhaseDiffing)
	p.step("asked %s for a VDiff", rep.Movement)

	var reply VDiffReply
	workflow.GetSignalChannel(ctx, VDiffReplySignal).Receive(ctx, &reply)
	rep.MovementPhase, rep.Reverse, rep.Result = reply.Phase, reply.Reverse, reply.Result
	if reply.Error != "" {
		code := reply.SQLState
		if !isSQLState(code) {
			code = pgerr.InternalError
		}
		return fail(code, "%s: %s", rep.Movement, reply.Error)
	}
	if rep.Result == nil {
		return fail(pgerr.InternalError, "%s answered without a result", rep.Movement)
	}
	enter(PhaseDone)
	p.step("VDiff of %s: %d differences over %d tables", rep.Movement, rep.Result.Differences, len(rep.Result.Reports))
	return rep, nil
}

// vdiffDetails renders a VDiff's report as its current details.
func vdiffDetails(title string, rep VDiffReport, step string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**%s**: %s\n\n", title, rep.Phase)
	fmt.Fprintf(&b, "- step: %s\n", step)
	if rep.Movement != "" {
		fmt.Fprintf(&b, "- movement: %s\n", rep.Movement)
	}
	if rep.MovementPhase != "" {
		dir := "sources against targets"
		if rep.Reverse {
			dir = "reverse: targets (serving) against sources"
		}
		fmt.Fprintf(&b, "- diffed in phase %s, %s\n", rep.MovementPhase, dir)
	}
	if d := rep.Result; d != nil {
		fmt.Fprintf(&b, "- result: %d differences over %d tables\n", d.Differences, len(d.Reports))
	}
	if rep.Error != "" {
		fmt.Fprintf(&b, "- error: %s\n", rep.Error)
	}
	return b.String()
}
