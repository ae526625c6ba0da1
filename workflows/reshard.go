package workflows

import (
	"errors"
	"fmt"
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
	// heartbeat and the targets' own progress, after this long. Short: a
	// cutover waits for the streams to reach its fence's marker while
	// the routers hold the tables' statements (at most 10 s), so a
	// stream whose Replicator died must be running again well within it.
	replicatorHeartbeatTimeout = 5 * time.Second
)

// Reshard moves a shard group's key ranges to a new set of shards: it
// checks the plan (PlanReshard: nothing is changed if it fails), copies
// every table of the group from each source shard (one heartbeating
// CopyTables per source), starts one change stream per source
// (StreamChanges), waits for the streams to catch up, runs a VDiff
// (DiffTables) and then waits, streams running, for the SwitchTraffic
// update, which moves the group's reads and writes to the targets and
// starts reverse streams (reshard_cutover.go), or with {"traffic":"reads"}
// only its replica reads (reshard_reads.go); the ReverseTraffic update
// moves them back, the Complete update ends it. The Cancel signal (or
// cancelling the workflow) while the sources serve stops everything and
// drops what the reshard created on every instance (CleanupReshard);
// while the targets serve the signal is refused.
// Queries: PhaseQuery, ProgressQuery, StepQuery.
func Reshard(ctx workflow.Context, in ReshardInput) (ReshardResult, error) {
	resume := in.Resume
	in.Resume = nil
	return runMovement(ctx, movement{
		name:         ReshardName,
		title:        "Reshard " + in.Database + "." + in.ShardGroup,
		maxLagBytes:  in.MaxLagBytes,
		resume:       resume,
		planActivity: PlanReshardActivity,
		planInput:    PlanReshardInput{WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Input: in},
		next: func(r *ReshardResume) any {
			next := in
			next.Resume = r
			return next
		},
	})
}

// movement is what differs between the data-movement workflows that share
// one run loop (Reshard, MoveTables): the activity that makes the plan,
// and the input a run continues as new with. Everything after the plan
// (copy, catch-up, VDiff, cutover, Complete, Cancel) works from the plan
// alone.
type movement struct {
	// name is the workflow type, which a long wait continues as new as.
	name string
	// title names the movement in the Temporal UI's details.
	title       string
	maxLagBytes int64
	// resume is set when the run continued as new.
	resume       *ReshardResume
	planActivity string
	planInput    any
	// next is the input to continue as new with, carrying resume.
	next func(resume *ReshardResume) any
}

// runMovement runs a data movement from its plan to its end.
func runMovement(ctx workflow.Context, in movement) (ReshardResult, error) {
	p, err := track(ctx)
	if err != nil {
		return ReshardResult{}, err
	}
	r := &reshard{in: in, p: p, prog: ReshardProgress{Phase: PhaseValidating, Copied: map[string]int64{}, Streams: map[string]LagSample{}}}
	if err := r.handlers(ctx); err != nil {
		return ReshardResult{}, err
	}
	defer r.endVDiffs(ctx)
	// work is cancelled by the Cancel signal, or with the workflow.
	work, cancelWork := workflow.WithCancel(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		for {
			workflow.GetSignalChannel(ctx, CancelSignal).Receive(ctx, nil)
			if why := r.cancelRefusal(); why != "" {
				r.p.step("Cancel refused: %s", why)
				continue
			}
			r.p.step("cancel requested")
			cancelWork()
			return
		}
	})
	err = r.run(work)
	if work.Err() != nil && !workflow.IsContinueAsNewError(err) {
		return r.cancel(ctx)
	}
	if err != nil && !workflow.IsContinueAsNewError(err) {
		r.prog.Error = errText(err)
		if r.planned {
			// A failed movement must not leave its slots behind: they keep
			// WAL on the sources for ever.
			if cerr := r.cleanup(ctx); cerr != nil {
				r.p.step("cleanup after the failure failed: %s", errText(cerr))
			}
		}
		// Runs that failed before this showed no failed phase; a query
		// replays them, so the upsert stays out of their histories.
		if workflow.GetVersion(ctx, failedPhaseVersion, workflow.DefaultVersion, 1) != workflow.DefaultVersion {
			r.phase(ctx, PhaseFailed)
		}
	}
	return r.result(), err
}

// failedPhaseVersion marks the runs that end a failure in phase failed.
const failedPhaseVersion = "tessera-movement-failed-phase"

// reshard is a running data movement (Reshard or MoveTables).
type reshard struct {
	in      movement
	p       *progress
	prog    ReshardProgress
	plan    ReshardPlan
	planned bool
	// live is the plan whose streams run: the forward plan before the
	// cutover, its reverse after.
	live    ReshardPlan
	streams map[string]workflow.Future
	stop    workflow.CancelFunc
	// want is the update (SwitchTraffic, ReverseTraffic or Complete) the
	// main loop is asked to run, reply its outcome; one at a time.
	// wantReads: the update moves replica reads only.
	want      string
	wantReads bool
	reply     error
	// fenceTried: a cutover may have left a fence on fencing's sources
	// and a table buffer, which a cancel must undo.
	fenceTried bool
	fencing    ReshardPlan
	// fenceGen is the next fence's generation (CutoverInput).
	fenceGen int
	// answering counts the VDiffRequestSignals not yet answered.
	answering int
	// lagFresh: the last lag sample succeeded.
	lagFresh bool
	// recheck, during a cutover that recorded itself on its shards,
	// checks no switchover or failover began on them since.
	recheck func() error
}

func (r *reshard) handlers(ctx workflow.Context) error {
	if err := workflow.SetQueryHandler(ctx, PhaseQuery, func() (string, error) { return r.prog.Phase, nil }); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, ProgressQuery, func() (ReshardProgress, error) { return r.prog, nil }); err != nil {
		return err
	}
	// The validators refuse before anything is written to the history.
	if err := workflow.SetUpdateHandlerWithOptions(ctx, SwitchTrafficUpdate, r.requestTraffic(SwitchTrafficUpdate),
		workflow.UpdateHandlerOptions{Validator: func(in TrafficInput) error { return r.trafficAllowed(SwitchTrafficUpdate, in) }}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, ReverseTrafficUpdate, r.requestTraffic(ReverseTrafficUpdate),
		workflow.UpdateHandlerOptions{Validator: func(in TrafficInput) error { return r.trafficAllowed(ReverseTrafficUpdate, in) }}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandlerWithOptions(ctx, CompleteUpdate, r.request(CompleteUpdate),
		workflow.UpdateHandlerOptions{Validator: func() error { return r.allowed(CompleteUpdate, PhaseSwitched) }}); err != nil {
		return err
	}
	return r.vdiffHandlers(ctx)
}

// switchedNow: the targets serve the group (a SwitchTraffic is the last
// cutover).
func (r *reshard) switchedNow() bool { return r.prog.Cutover != nil && !r.prog.Cutover.Reverse }

// request hands an update to the main loop, which owns the streams, and
// returns its outcome.
func (r *reshard) request(name string) func(workflow.Context) error {
	return r.requestWith(name, false)
}

// requestWith is request for an update that may move replica reads only.
func (r *reshard) requestWith(name string, reads bool) func(workflow.Context) error {
	return func(ctx workflow.Context) error {
		r.want, r.wantReads = name, reads
		if err := workflow.Await(ctx, func() bool { return r.want == "" }); err != nil {
			return err
		}
		return r.reply
	}
}

// allowed refuses an update outside its phase, or while another runs.
func (r *reshard) allowed(name, phase string) error {
	if r.want != "" {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s is running: wait for it", r.want), pgerr.ObjectNotInPrerequisiteState, nil)
	}
	if r.prog.Phase != phase {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s needs phase %s; the reshard is in phase %s", name, phase, r.prog.Phase),
			pgerr.ObjectNotInPrerequisiteState, nil)
	}
	if name == ReverseTrafficUpdate && r.prog.ReverseBroken != "" {
		return temporal.NewNonRetryableApplicationError("the sources no longer have every write the targets took: "+r.prog.ReverseBroken+
			"; ReverseTraffic is refused, Complete ends the movement", pgerr.ObjectNotInPrerequisiteState, nil)
	}
	if name == ReverseTrafficUpdate && r.plan.Imports() {
		// No router ever sent the tables' traffic to the external
		// Postgres: the application goes back to it by itself, which the
		// reverse streams keep current until Complete.
		return temporal.NewNonRetryableApplicationError("an import cannot move traffic back to the external Postgres",
			pgerr.FeatureNotSupported, nil)
	}
	return nil
}

// cancelRefusal says why the Cancel signal cannot stop the reshard now,
// or "" when it can.
func (r *reshard) cancelRefusal() string {
	switch {
	case r.switchedNow():
		return "the cutover is done: the targets serve the group. ReverseTraffic moves it back first; Complete ends the reshard"
	case r.want != "":
		return r.want + " is running: wait for it"
	}
	return ""
}

// phase records the phase for the queries and, as TesseraPhase and the
// run's current details, for the Temporal UI.
func (r *reshard) phase(ctx workflow.Context, name string) {
	enterReshardPhase(ctx, r.p, r.in.title, &r.prog, name)
}

func (r *reshard) result() ReshardResult {
	return ReshardResult{Phase: r.prog.Phase, Steps: r.p.steps, Copied: r.prog.Copied}
}

func (r *reshard) run(ctx workflow.Context) error {
	if res := r.in.resume; res != nil {
		r.plan, r.planned, r.fenceGen = res.Plan, true, res.FenceGeneration
		r.prog.RowsEstimated = r.plan.EstimatedRows()
		r.prog.LastDiff = res.LastDiff
		for k, v := range res.Copied {
			r.prog.Copied[k] = v
		}
		for k, v := range res.Streams {
			r.prog.Streams[k] = v
		}
		r.p.step("continued as new: the copy is done")
		r.prog.Cutover, r.prog.ReadsSwitched = res.Cutover, res.Reads
		r.prog.Restarts, r.prog.ReverseBroken = res.Restarts, res.ReverseBroken
		if r.switchedNow() {
			if r.prog.ReverseBroken == "" {
				r.startStreams(ctx, r.plan.Reversed())
			}
			r.phase(ctx, PhaseSwitched)
			return r.switched(ctx)
		}
	} else if err := r.validate(ctx); err != nil {
		return err
	}
	copied := r.in.resume != nil
	for {
		err := r.forward(ctx, copied)
		if err == nil || r.prog.Cutover != nil || ctx.Err() != nil || !IsSourceFailover(err) {
			return err
		}
		if err := r.restart(ctx, err); err != nil {
			return err
		}
		copied = false
	}
}

// maxMovementRestarts bounds the restarts sources' failovers cause: a
// source that keeps failing over is not worth copying again and again.
const maxMovementRestarts = 3

// restart, after a source failed over before the cutover, stops the
// streams and undoes the movement on every instance (ResetMovement:
// slots wherever they are, the targets' rows, origins and progress), so
// that it starts again from new snapshots: nothing is skipped (a new
// slot on the new primary would start after changes the targets lack)
// and nothing is kept that the old primary alone had. After
// maxMovementRestarts it gives up, and the movement fails (and cleans
// up) saying why.
func (r *reshard) restart(ctx workflow.Context, cause error) error {
	// Movements that failed on this before replay as they did.
	if workflow.GetVersion(ctx, "source-failover-restart", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return cause
	}
	if r.prog.Restarts >= maxMovementRestarts {
		return failed(cause, "the sources failed over %d times during the movement; it stops", r.prog.Restarts+1)
	}
	r.prog.Restarts++
	r.prog.LastRestart = errText(cause)
	r.p.step("restart %d of %d from new snapshots: %s", r.prog.Restarts, maxMovementRestarts, r.prog.LastRestart)
	if err := r.stopStreams(ctx); err != nil {
		r.p.step("%s", errText(err))
	}
	var res ResetMovementResult
	actx := workflow.WithActivityOptions(ctx, cleanupOptions)
	actx = withSummary(actx, "undo the movement on %v and %v before it starts again", r.plan.Sources, r.plan.Targets)
	if err := workflow.ExecuteActivity(actx, ResetMovementActivity, r.plan).Get(ctx, &res); err != nil {
		return failed(err, "undoing the movement after a source failed over")
	}
	if len(res.Unreached) > 0 {
		r.p.step("the slots could not be dropped on %v: drop them by hand (docs/operations.md)", res.Unreached)
	}
	r.plan.Terms = res.Terms
	r.prog.Copied, r.prog.Streams, r.prog.LastDiff = map[string]int64{}, map[string]LagSample{}, nil
	r.p.step("the movement is undone; the sources' terms are now %v", res.Terms)
	return nil
}

// forward runs the movement up to its cutover, which the operator asks
// for: the copy (unless copied), the catch-up and the VDiff.
func (r *reshard) forward(ctx workflow.Context, copied bool) error {
	if !copied {
		if err := r.copy(ctx); err != nil {
			return err
		}
	}
	r.phase(ctx, PhaseCatchingUp)
	r.startStreams(ctx, r.plan)
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
	return r.ready(ctx)
}

// ready waits, forward streams running, for SwitchTraffic.
func (r *reshard) ready(ctx workflow.Context) error {
	r.p.step("waiting for SwitchTraffic: Cancel ends the reshard")
	for {
		requested, err := workflow.AwaitWithTimeout(ctx, readyLagPoll, func() bool { return r.want != "" })
		if err != nil {
			return err
		}
		if served, err := r.serveVDiff(ctx); served {
			if err != nil {
				return err
			}
			continue
		}
		if requested {
			if r.wantReads {
				r.reply = r.switchReads(ctx, r.want == SwitchTrafficUpdate)
				r.want, r.wantReads = "", false
				if err := ctx.Err(); err != nil {
					return err
				}
				continue
			}
			r.reply = r.cutover(ctx, r.plan)
			r.want = ""
			if r.switchedNow() {
				return r.switched(ctx)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			continue
		}
		if err := r.idle(ctx); err != nil {
			return err
		}
	}
}

// idle refreshes the streams' lag and continues as new when the history
// grows long.
func (r *reshard) idle(ctx workflow.Context) error {
	if err := r.sampleLag(ctx); err != nil {
		return err
	}
	if workflow.GetInfo(ctx).GetCurrentHistoryLength() <= reshardHistoryLimit || r.want == VDiffUpdate {
		// A VDiff asked for during the sample runs first: its caller
		// waits on this run.
		return nil
	}
	if err := r.stopStreams(ctx); err != nil {
		return err
	}
	next := r.in.next(&ReshardResume{Plan: r.plan, Copied: r.prog.Copied, LastDiff: r.prog.LastDiff, Streams: r.prog.Streams,
		Cutover: r.prog.Cutover, FenceGeneration: r.fenceGen, Reads: r.prog.ReadsSwitched, Restarts: r.prog.Restarts, ReverseBroken: r.prog.ReverseBroken})
	return workflow.NewContinueAsNewError(ctx, r.in.name, next)
}

func (r *reshard) validate(ctx workflow.Context) error {
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: 2 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
		Summary:             "plan: " + r.in.title,
	}
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), r.in.planActivity, r.in.planInput).Get(ctx, &r.plan); err != nil {
		return failed(err, "checking the plan (%s)", r.in.title)
	}
	r.planned = true
	r.prog.RowsEstimated = r.plan.EstimatedRows()
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

// onSourceQueue routes an activity that reads one source shard to the
// task queue of the Replicator beside it, when the plan found one
// registered (ReshardPlan.Queues); otherwise it stays on the workflow's
// own queue, served by the general workers.
func onSourceQueue(ctx workflow.Context, plan ReshardPlan, src string) workflow.Context {
	if q := plan.Queues[src]; q != "" {
		return workflow.WithTaskQueue(ctx, q)
	}
	return ctx
}

func (r *reshard) copy(ctx workflow.Context) error {
	r.phase(ctx, PhaseCopying)
	futures := make([]workflow.Future, len(r.plan.Sources))
	for i, src := range r.plan.Sources {
		actx := withSummary(onSourceQueue(replicatorCtx(ctx), r.plan, src), "copy %s from %s to %v", r.plan.tableNames(), src, r.plan.Targets)
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

// startStreams starts one stream per source of plan: the forward plan,
// or after the cutover its reverse.
func (r *reshard) startStreams(ctx workflow.Context, plan ReshardPlan) {
	sctx, stop := workflow.WithCancel(ctx)
	r.live, r.stop, r.streams = plan, stop, map[string]workflow.Future{}
	for _, src := range plan.Sources {
		in := SourceInput{Plan: plan, Source: src, FenceGeneration: r.fenceGen}
		actx := withSummary(onSourceQueue(replicatorCtx(sctx), plan, src), "stream %s from %s to %v", plan.tableNames(), src, plan.Targets)
		r.streams[src] = workflow.ExecuteActivity(actx, StreamChangesActivity, in)
	}
	r.p.step("streaming changes from %v to %v", plan.Sources, plan.Targets)
}

// stopStreams cancels the streams and waits until they have stopped.
func (r *reshard) stopStreams(ctx workflow.Context) error {
	if r.stop == nil {
		return nil
	}
	r.stop()
	var errs []error
	for _, src := range r.live.Sources {
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
	if r.streams == nil {
		return nil
	}
	for _, src := range r.live.Sources {
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
	if r.streams == nil {
		return nil // a failed Complete stopped them
	}
	if err := r.streamFailed(ctx); err != nil {
		return err
	}
	var lag StreamLagResult
	err := workflow.ExecuteActivity(withSummary(normal.ctx(ctx), "lag of the streams from %v", r.live.Sources), StreamLagActivity, r.live).Get(ctx, &lag)
	r.lagFresh = err == nil
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
	limit := r.in.maxLagBytes
	if limit <= 0 {
		limit = defaultMaxLagBytes
	}
	for {
		if err := r.sampleLag(ctx); err != nil {
			return err
		}
		// A sample that failed (a source failing over has no slot to
		// read) leaves the last one, which may be stale.
		caughtUp := r.lagFresh || workflow.GetVersion(ctx, "failover-aware-catchup", workflow.DefaultVersion, 1) == workflow.DefaultVersion
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
		// DiffTables runs each stream to its consistent point itself,
		// and fails as it failed if the cause is still there (a source
		// that failed over: SourceFailover); a stream cut off by a
		// failover is no reason to fail.
		if workflow.GetVersion(ctx, "failover-aware-catchup", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
			return err
		}
		r.p.step("%s", errText(err))
	}
	res, err := r.runDiff(ctx, r.plan)
	if err != nil {
		return err
	}
	r.prog.LastDiff = &res
	r.p.step("VDiff: %d differences", res.Differences)
	r.startStreams(ctx, r.plan)
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
// It undoes a fence and a table buffer a stopped cutover may have left;
// after a cutover it drops the reverse streams' objects too, and the
// targets' fence after a ReverseTraffic; while the targets serve it keeps
// the sources' fence, which keeps stale routers' writes off them.
func (r *reshard) cleanup(ctx workflow.Context) error {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if err := r.stopStreams(dctx); err != nil {
		r.p.step("%s", errText(err))
	}
	actx := workflow.WithActivityOptions(dctx, cleanupOptions)
	if err := r.undoReads(dctx); err != nil {
		return err
	}
	if r.fenceTried {
		if err := r.undoFence(dctx, r.cutoverInput(dctx, r.fencing)); err != nil {
			return err
		}
	}
	if r.prog.Cutover != nil {
		// A cutover cancelled before it cleared its table buffer.
		if err := workflow.ExecuteActivity(actx, ClearTableBufferActivity, r.cutoverInput(dctx, r.plan)).Get(dctx, nil); err != nil {
			return err
		}
	}
	plans := []ReshardPlan{r.plan}
	if r.prog.Cutover != nil {
		plans = append(plans, r.plan.Reversed())
	}
	if r.prog.Cutover != nil && r.prog.Cutover.Reverse {
		in := r.cutoverInput(dctx, r.plan.Reversed())
		if err := workflow.ExecuteActivity(actx, UnfenceSourcesActivity, in).Get(dctx, nil); err != nil {
			return err
		}
	}
	for _, plan := range plans {
		if err := workflow.ExecuteActivity(actx, CleanupReshardActivity, plan).Get(dctx, nil); err != nil {
			return err
		}
	}
	r.p.step("dropped the slots, publications, origins and progress rows of %s", r.plan.Key)
	return nil
}

// cleanupOptions: dropping what a reshard made is retried for a while.
var cleanupOptions = workflow.ActivityOptions{
	StartToCloseTimeout: 5 * time.Minute,
	Summary:             "drop what the reshard made on its instances",
	HeartbeatTimeout:    replicatorHeartbeatTimeout,
	RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second, MaximumAttempts: 20},
}
