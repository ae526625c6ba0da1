package workflows

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/pgerr"
)

const (
	// defaultMaxLagBytes ends the catch-up when ReshardInput.MaxLagBytes
	// is zero.
	defaultMaxLagBytes = 1 << 20
	// lagPoll is how often the catch-up phase reads the streams' lag.
	lagPoll = 5 * time.Second
	// readyLagPoll is how often a reshard waiting for its cutover refreshes
	// the lag the progress query shows: rarely, to keep its history short.
	readyLagPoll = time.Minute
	// reshardHistoryLimit: past this many events a reshard waiting for its
	// cutover continues as new, well before Temporal's 50k-event limit.
	reshardHistoryLimit = 10000
	// replicatorHeartbeatTimeout: the copy and stream activities heartbeat
	// every second; one whose worker died is retried, from its last
	// heartbeat and the targets' own progress, after this long.
	replicatorHeartbeatTimeout = 30 * time.Second
)

// errCutoverPlanned answers SwitchTraffic: the cutover is not built yet.
var errCutoverPlanned = temporal.NewNonRetryableApplicationError(
	"not yet implemented: the cutover (SwitchTraffic) is planned", pgerr.FeatureNotSupported, nil)

// Reshard moves a shard group's key ranges to a new set of shards: it
// checks the plan (PlanReshard: nothing is changed if it fails), copies
// every table of the group from each source shard (one heartbeating
// CopyTables per source), starts one change stream per source
// (StreamChanges), waits for the streams to catch up, runs a VDiff
// (DiffTables) and then waits, streams running, for a cutover that is not
// built yet: SwitchTraffic is refused. The Cancel signal (or cancelling
// the workflow) stops everything and drops what the reshard created on
// every instance (CleanupReshard). Queries: PhaseQuery, ProgressQuery,
// StepQuery.
func Reshard(ctx workflow.Context, in ReshardInput) (ReshardResult, error) {
	p, err := track(ctx)
	if err != nil {
		return ReshardResult{}, err
	}
	r := &reshard{in: in, p: p, prog: ReshardProgress{Phase: PhaseValidating, Copied: map[string]int64{}, Streams: map[string]LagSample{}}}
	if err := r.handlers(ctx); err != nil {
		return ReshardResult{}, err
	}
	// work is cancelled by the Cancel signal, or with the workflow.
	work, cancelWork := workflow.WithCancel(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		workflow.GetSignalChannel(ctx, CancelSignal).Receive(ctx, nil)
		r.p.step("cancel requested")
		cancelWork()
	})
	err = r.run(work)
	if work.Err() != nil && !workflow.IsContinueAsNewError(err) {
		return r.cancel(ctx)
	}
	if err != nil && !workflow.IsContinueAsNewError(err) && r.planned {
		// A failed reshard must not leave its slots behind: they keep WAL
		// on the sources for ever.
		r.prog.Error = errText(err)
		if cerr := r.cleanup(ctx); cerr != nil {
			r.p.step("cleanup after the failure failed: %s", errText(cerr))
		}
	}
	return r.result(), err
}

type reshard struct {
	in      ReshardInput
	p       *progress
	prog    ReshardProgress
	plan    ReshardPlan
	planned bool
	streams map[string]workflow.Future
	stop    workflow.CancelFunc
}

func (r *reshard) handlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, PhaseQuery, func() (string, error) { return r.prog.Phase, nil }); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, ProgressQuery, func() (ReshardProgress, error) { return r.prog, nil }); err != nil {
		return err
	}
	// The validator refuses before anything is written to the history.
	return workflow.SetUpdateHandlerWithOptions(ctx, SwitchTrafficUpdate,
		func(workflow.Context) error { return errCutoverPlanned },
		workflow.UpdateHandlerOptions{Validator: func() error { return errCutoverPlanned }})
}

// phase records the phase for the queries and, as TesseraPhase and the
// run's current details, for the Temporal UI.
func (r *reshard) phase(ctx workflow.Context, name string) {
	enterReshardPhase(ctx, r.p, r.in, &r.prog, name)
}

func (r *reshard) result() ReshardResult {
	return ReshardResult{Phase: r.prog.Phase, Steps: r.p.steps, Copied: r.prog.Copied}
}

func (r *reshard) run(ctx workflow.Context) error {
	if res := r.in.Resume; res != nil {
		r.plan, r.planned = res.Plan, true
		r.prog.LastDiff = res.LastDiff
		for k, v := range res.Copied {
			r.prog.Copied[k] = v
		}
		for k, v := range res.Streams {
			r.prog.Streams[k] = v
		}
		r.p.step("continued as new: the copy is done")
	} else {
		if err := r.validate(ctx); err != nil {
			return err
		}
		if err := r.copy(ctx); err != nil {
			return err
		}
	}
	r.phase(ctx, PhaseCatchingUp)
	r.startStreams(ctx)
	if err := r.catchUp(ctx); err != nil {
		return err
	}
	if r.prog.LastDiff == nil {
		r.phase(ctx, PhaseDiffing)
		if err := r.diff(ctx); err != nil {
			return err
		}
	}
	r.phase(ctx, PhaseReadyForCutover)
	r.p.step("waiting for the cutover, which is planned: Cancel ends the reshard")
	for {
		if err := workflow.Sleep(ctx, readyLagPoll); err != nil {
			return err
		}
		if err := r.sampleLag(ctx); err != nil {
			return err
		}
		if workflow.GetInfo(ctx).GetCurrentHistoryLength() > reshardHistoryLimit {
			if err := r.stopStreams(ctx); err != nil {
				return err
			}
			next := r.in
			next.Resume = &ReshardResume{Plan: r.plan, Copied: r.prog.Copied, LastDiff: r.prog.LastDiff, Streams: r.prog.Streams}
			return workflow.NewContinueAsNewError(ctx, ReshardName, next)
		}
	}
}

func (r *reshard) validate(ctx workflow.Context) error {
	in := PlanReshardInput{WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Input: r.in}
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: 2 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
		Summary:             "plan the reshard of " + r.in.Database + "." + r.in.ShardGroup,
	}
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), PlanReshardActivity, in).Get(ctx, &r.plan); err != nil {
		return failed(err, "checking the reshard of %s.%s", r.in.Database, r.in.ShardGroup)
	}
	r.planned = true
	r.p.step("plan: %d tables from %v to %v", len(r.plan.Tables), r.plan.Sources, r.plan.Targets)
	return nil
}

// replicatorCtx gives the long copy and stream activities: no overall
// timeout that a large table could outlast, retried without end (a
// refusal is final; Cancel stops the rest), delivered cancellation.
func replicatorCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 30 * 24 * time.Hour,
		HeartbeatTimeout:    replicatorHeartbeatTimeout,
		WaitForCancellation: true,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    time.Second,
			BackoffCoefficient: 2,
			MaximumInterval:    time.Minute,
		},
	})
}

func (r *reshard) copy(ctx workflow.Context) error {
	r.phase(ctx, PhaseCopying)
	futures := make([]workflow.Future, len(r.plan.Sources))
	for i, src := range r.plan.Sources {
		actx := withSummary(replicatorCtx(ctx), "copy %s from %s to %v", r.plan.tableNames(), src, r.plan.Targets)
		futures[i] = workflow.ExecuteActivity(actx, CopyTablesActivity, SourceInput{Plan: r.plan, Source: src})
	}
	var errs []error
	for i, f := range futures {
		var res CopyTablesResult
		if err := f.Get(ctx, &res); err != nil {
			errs = append(errs, failed(err, "copying from %s", r.plan.Sources[i]))
			continue
		}
		for table, n := range res.Rows {
			r.prog.Copied[table] += n
		}
		r.p.step("copied from %s", r.plan.Sources[i])
	}
	return errors.Join(errs...)
}

func (r *reshard) startStreams(ctx workflow.Context) {
	sctx, stop := workflow.WithCancel(ctx)
	r.stop, r.streams = stop, map[string]workflow.Future{}
	for _, src := range r.plan.Sources {
		actx := withSummary(replicatorCtx(sctx), "stream %s from %s to %v", r.plan.tableNames(), src, r.plan.Targets)
		r.streams[src] = workflow.ExecuteActivity(actx, StreamChangesActivity, SourceInput{Plan: r.plan, Source: src})
	}
	r.p.step("streaming changes from %v", r.plan.Sources)
}

// stopStreams cancels the streams and waits until they have stopped.
func (r *reshard) stopStreams(ctx workflow.Context) error {
	if r.stop == nil {
		return nil
	}
	r.stop()
	var errs []error
	for _, src := range r.plan.Sources {
		err := r.streams[src].Get(ctx, nil)
		var canceled *temporal.CanceledError
		if err != nil && !errors.As(err, &canceled) {
			errs = append(errs, failed(err, "stream from %s", src))
		}
	}
	r.stop, r.streams = nil, nil
	return errors.Join(errs...)
}

// streamFailed reports a stream that ended by itself: only a refusal
// ends one (its retries are unbounded), and the reshard cannot go on.
func (r *reshard) streamFailed(ctx workflow.Context) error {
	for _, src := range r.plan.Sources {
		if f := r.streams[src]; f.IsReady() {
			err := f.Get(ctx, nil)
			if err == nil {
				err = temporal.NewApplicationError("the stream ended", pgerr.InternalError)
			}
			return failed(err, "stream from %s", src)
		}
	}
	return nil
}

func (r *reshard) sampleLag(ctx workflow.Context) error {
	if err := r.streamFailed(ctx); err != nil {
		return err
	}
	var lag StreamLagResult
	err := workflow.ExecuteActivity(withSummary(normal.ctx(ctx), "lag of the streams from %v", r.plan.Sources), StreamLagActivity, r.plan).Get(ctx, &lag)
	if err != nil {
		// A missed sample is not a failure of the reshard.
		r.p.log.Warn("reading the streams' lag", "error", errText(err))
		return ctx.Err()
	}
	for _, s := range lag.Sources {
		r.prog.Streams[s.Source] = s
	}
	r.p.show()
	return nil
}

func (r *reshard) catchUp(ctx workflow.Context) error {
	limit := r.in.MaxLagBytes
	if limit <= 0 {
		limit = defaultMaxLagBytes
	}
	for {
		if err := r.sampleLag(ctx); err != nil {
			return err
		}
		caughtUp := true
		for _, src := range r.plan.Sources {
			s, ok := r.prog.Streams[src]
			caughtUp = caughtUp && ok && s.LagBytes <= limit
		}
		if caughtUp {
			r.p.step("every stream is within %d bytes of its source", limit)
			return nil
		}
		if err := sleep(ctx, lagPoll, "wait for the streams from %v to catch up", r.plan.Sources); err != nil {
			return err
		}
	}
}

// diff stops the streams (DiffTables brings each target exactly to its
// consistent point itself), runs the VDiff and starts the streams again.
func (r *reshard) diff(ctx workflow.Context) error {
	if err := r.stopStreams(ctx); err != nil {
		return err
	}
	var res DiffTablesResult
	actx := withSummary(replicatorCtx(ctx), "VDiff %s: %v against %v", r.plan.tableNames(), r.plan.Sources, r.plan.Targets)
	err := workflow.ExecuteActivity(actx, DiffTablesActivity, r.plan).Get(ctx, &res)
	if err != nil {
		return failed(err, "VDiff")
	}
	r.prog.LastDiff = &res
	r.p.step("VDiff: %d differences", res.Differences)
	r.startStreams(ctx)
	return nil
}

// cancel stops the activities and drops what the reshard created.
func (r *reshard) cancel(ctx workflow.Context) (ReshardResult, error) {
	r.phase(ctx, PhaseCancelling)
	if r.planned {
		if err := r.cleanup(ctx); err != nil {
			return r.result(), failed(err, "cleaning up the cancelled reshard")
		}
	}
	r.phase(ctx, PhaseCancelled)
	return r.result(), nil
}

// cleanup runs, whatever cancelled the workflow, in a context of its own.
func (r *reshard) cleanup(ctx workflow.Context) error {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if err := r.stopStreams(dctx); err != nil {
		r.p.step("%s", errText(err))
	}
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		HeartbeatTimeout:    replicatorHeartbeatTimeout,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second, MaximumAttempts: 20},
		Summary:             "drop the reshard's slots, publications and origins on " + r.plan.shardNames(),
	}
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(dctx, opts), CleanupReshardActivity, r.plan).Get(dctx, nil)
	if err == nil {
		r.p.step("dropped the slots, publications, origins and progress rows of %s", r.plan.Key)
	}
	return err
}
