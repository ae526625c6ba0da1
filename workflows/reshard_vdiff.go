package workflows

import (
	"fmt"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/pgerr"
)

// A VDiff on demand: the VDiff update, or a VDiff workflow's
// VDiffRequestSignal, asks a running movement for one while its streams
// run. The main loop (ready, switched), which owns the streams, runs it
// as it runs the cutover: it stops the live streams (DiffTables then runs
// each exactly to its consistent point), diffs the live plan — the
// reverse one once the targets serve — and starts the streams again.

// vdiffHandlers installs the update and the signal's receiver.
func (r *reshard) vdiffHandlers(ctx workflow.Context) error {
	if err := workflow.SetUpdateHandlerWithOptions(ctx, VDiffUpdate, r.askVDiff,
		workflow.UpdateHandlerOptions{Validator: func() error { return r.vdiffRefusal() }}); err != nil {
		return err
	}
	workflow.Go(ctx, func(ctx workflow.Context) {
		ch := workflow.GetSignalChannel(ctx, VDiffRequestSignal)
		for {
			var req VDiffRequest
			ch.Receive(ctx, &req)
			r.answering++
			workflow.Go(ctx, func(ctx workflow.Context) {
				defer func() { r.answering-- }()
				r.answerVDiff(ctx, req)
			})
		}
	})
	return nil
}

// vdiffRefusal refuses a VDiff where no streams run, or while another
// request runs.
func (r *reshard) vdiffRefusal() error {
	if r.want != "" {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s is running: wait for it", r.want), pgerr.ObjectNotInPrerequisiteState, nil)
	}
	if r.prog.Phase != PhaseReadyForCutover && r.prog.Phase != PhaseSwitched {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("a VDiff needs phase %s or %s, where the streams run; the movement is in phase %s",
			PhaseReadyForCutover, PhaseSwitched, r.prog.Phase), pgerr.ObjectNotInPrerequisiteState, nil)
	}
	if r.streams == nil {
		return temporal.NewNonRetryableApplicationError("the streams are stopped (a failed Complete stops them): ask Complete again",
			pgerr.ObjectNotInPrerequisiteState, nil)
	}
	return nil
}

// askVDiff hands the VDiff to the main loop and returns its result.
func (r *reshard) askVDiff(ctx workflow.Context) (DiffTablesResult, error) {
	r.want = VDiffUpdate
	if err := workflow.Await(ctx, func() bool { return r.want == "" }); err != nil {
		return DiffTablesResult{}, err
	}
	if r.reply != nil {
		return DiffTablesResult{}, r.reply
	}
	return *r.prog.LastDiff, nil
}

// answerVDiff serves a VDiffRequestSignal and signals the outcome back.
func (r *reshard) answerVDiff(ctx workflow.Context, req VDiffRequest) {
	reply := VDiffReply{Phase: r.prog.Phase, Reverse: r.switchedNow()}
	err := r.vdiffRefusal()
	if err == nil {
		var res DiffTablesResult
		res, err = r.askVDiff(ctx)
		reply.Result = &res
	}
	if err != nil {
		reply.Result, reply.Error, reply.SQLState = nil, errText(err), sqlState(err)
	}
	// Answered even when the movement is being cancelled: the VDiff
	// workflow waits for it.
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if err := workflow.SignalExternalWorkflow(dctx, req.WorkflowID, req.RunID, VDiffReplySignal, reply).Get(dctx, nil); err != nil {
		// The VDiff workflow is gone: the result stays in LastDiff.
		r.p.log.Warn("answering a VDiff request", "workflow", req.WorkflowID, "error", errText(err))
	}
}

// endVDiffs, as the run ends, refuses a VDiff asked for and not run, and
// waits until every VDiff workflow that asked has its answer: without it
// that workflow would wait for ever.
func (r *reshard) endVDiffs(ctx workflow.Context) {
	if r.want == VDiffUpdate {
		r.reply = temporal.NewNonRetryableApplicationError("the movement ended before the VDiff ran", pgerr.ObjectNotInPrerequisiteState, nil)
		r.want = ""
	}
	if r.answering > 0 {
		dctx, _ := workflow.NewDisconnectedContext(ctx)
		_ = workflow.Await(dctx, func() bool { return r.answering == 0 })
	}
}

// serveVDiff runs the VDiff the main loop was asked for, if that is the
// request; the error returned ends the movement (a stream failed).
func (r *reshard) serveVDiff(ctx workflow.Context) (bool, error) {
	if r.want != VDiffUpdate {
		return false, nil
	}
	plan := r.live
	r.p.step("VDiff asked for: stopping the streams from %v", plan.Sources)
	if err := r.stopStreams(ctx); err != nil {
		r.reply, r.want = err, ""
		return true, err
	}
	res, err := r.runDiff(ctx, plan)
	r.startStreams(ctx, plan)
	r.reply, r.want = err, ""
	if err == nil {
		r.prog.LastDiff = &res
		r.p.step("VDiff of %v against %v: %d differences", plan.Sources, plan.Targets, res.Differences)
	} else {
		r.p.step("VDiff failed: %s", errText(err))
	}
	return true, ctx.Err()
}

// runDiff runs DiffTables on plan, the streams stopped.
func (r *reshard) runDiff(ctx workflow.Context, plan ReshardPlan) (DiffTablesResult, error) {
	var res DiffTablesResult
	actx := withSummary(replicatorCtx(ctx), "VDiff %s: %v against %v", plan.tableNames(), plan.Sources, plan.Targets)
	if err := workflow.ExecuteActivity(actx, DiffTablesActivity, plan).Get(ctx, &res); err != nil {
		return res, failed(err, "VDiff")
	}
	return res, nil
}
