package workflows

import (
	"fmt"
	"regexp"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/pgerr"
)

const (
	// cutoverBufferFor is how long routers hold the group's statements:
	// longer than the fence's retries and the catch-up take, so that a
	// cutover that goes well is waited out, not failed.
	cutoverBufferFor = 10 * time.Second
	// cutoverMaxCatchUp: a stream that takes longer to confirm its
	// source's position refuses the cutover (the streams confirm every
	// second, so about a second of work is left at most).
	cutoverMaxCatchUp = 3 * time.Second
	// cutoverMarkerWait bounds the wait for the streams to apply the
	// fence's marker: far more than the catch-up CheckCutover measured.
	cutoverMarkerWait = 30 * time.Second
	// cutoverRouterWait bounds the wait for routers to apply the new
	// topology; past it the fence keeps stale routers' writes off the
	// sources, and they plan them again.
	cutoverRouterWait = 30 * time.Second
	// cutoverHeartbeat: every cutover step heartbeats each second; an
	// attempt whose worker died is retried after this long rather than
	// after its start-to-close timeout. Between the table buffer and its
	// release the routers hold the group's statements at most 10 s (their
	// buffer window), which a worker's death must not use up: a step
	// retried 30 s later would fail the held writes.
	cutoverHeartbeat = 3 * time.Second
)

// notBufferID is what a table buffer id may not hold.
var notBufferID = regexp.MustCompile(`[^A-Za-z0-9_.-]`)

// cutoverStep gives one cutover step's activity: bounded, a few attempts
// (0: until it succeeds or is refused), a dead worker's attempt retried
// after cutoverHeartbeat (changing activity options changes no command,
// so running workflows replay unchanged).
// Its summary names what the step does to which shards, for the Web UI.
func cutoverStep(ctx workflow.Context, timeout time.Duration, attempts int32, format string, args ...any) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		Summary:             fmt.Sprintf(format, args...),
		StartToCloseTimeout: timeout,
		HeartbeatTimeout:    cutoverHeartbeat,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    200 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    2 * time.Second,
			MaximumAttempts:    attempts,
		},
	})
}

// cutoverInput is the input of a cutover of from's sources to its
// targets: the forward plan (SwitchTraffic) or its reverse.
func (r *reshard) cutoverInput(ctx workflow.Context, from ReshardPlan) CutoverInput {
	limit := r.in.maxLagBytes
	if limit <= 0 {
		limit = defaultMaxLagBytes
	}
	return CutoverInput{
		Plan:            from,
		FenceGeneration: r.fenceGen,
		BufferID:        notBufferID.ReplaceAllString(workflow.GetInfo(ctx).WorkflowExecution.ID, "_"),
		BufferFor:       cutoverBufferFor,
		MaxLagBytes:     limit,
		MaxCatchUp:      cutoverMaxCatchUp,
		RouterWait:      cutoverRouterWait,
	}
}

// cutover moves the group from from's sources to its targets: r.plan for
// SwitchTraffic, r.plan.Reversed() for ReverseTraffic, whose streams
// run when it starts. Before the topology switch any failure undoes what
// it did (the fence, the buffer), restarts the streams and returns why;
// the operator may try again. From the switch on it only goes forward.
func (r *reshard) cutover(ctx workflow.Context, from ReshardPlan) error {
	reverse := !slices.Equal(from.Sources, r.plan.Sources)
	back := PhaseReadyForCutover
	if reverse {
		back = PhaseSwitched
	} else if d := r.prog.LastDiff; d == nil || !d.Done || d.Differences != 0 {
		return temporal.NewNonRetryableApplicationError("the last VDiff is not clean: a cutover needs one with no differences",
			pgerr.ObjectNotInPrerequisiteState, nil)
	}
	if r.streams == nil {
		return temporal.NewNonRetryableApplicationError("the streams are stopped (a Complete failed part way): ask Complete again",
			pgerr.ObjectNotInPrerequisiteState, nil)
	}
	if err := r.streamFailed(ctx); err != nil {
		return err
	}
	in := r.cutoverInput(ctx, from)
	var check CheckCutoverResult
	if err := workflow.ExecuteActivity(cutoverStep(ctx, 30*time.Second, 1, "check the streams from %v before the cutover", from.Sources), CheckCutoverActivity, in).Get(ctx, &check); err != nil {
		return failed(err, "checking the streams before the cutover")
	}
	r.p.step("streams ready for the cutover from %v: catch-up %v s", from.Sources, check.CatchUpSeconds)
	// A switchover or failover of one of the shards excludes the cutover,
	// and the cutover a switchover (docs/operations.md). Workflows that
	// began cutovers before this replay without the records.
	r.recheck = nil
	if workflow.GetVersion(ctx, "cutover-exclusion", workflow.DefaultVersion, 1) >= 1 {
		again, end, err := beginCutover(ctx, from)
		if err != nil {
			return err
		}
		defer end()
		r.recheck = again
	}
	r.phase(ctx, PhaseSwitching)
	r.fenceTried, r.fencing = true, from
	report := &CutoverReport{Reverse: reverse}
	if err := r.beforeSwitch(ctx, &in, report); err != nil {
		if uerr := r.undoFence(ctx, in); uerr != nil {
			// The sources stay fenced: the reshard cannot go on safely.
			return failed(uerr, "undoing the fence after %s", errText(err))
		}
		r.fenceTried = false
		// Streams that stopped at the marker, or did not reach it, start
		// again from their slots, and stop only at the next fence's
		// marker: this one's may be in the WAL more than once.
		r.fenceGen++
		if serr := r.stopStreams(ctx); serr != nil {
			r.p.step("%s", errText(serr))
		}
		r.startStreams(ctx, from)
		r.phase(ctx, back)
		return err
	}
	// The point of no return is behind: record it before anything else.
	// The switch moved replica reads switched ahead with the writes
	// (SwitchTopology drops the replica key ranges).
	r.prog.Cutover, r.fenceTried, r.prog.ReadsSwitched = report, false, nil
	r.fenceGen++
	r.p.step("topology revision %d routes the group to %v", report.Revision, from.Targets)
	r.afterSwitch(ctx, in, report)
	r.startStreams(ctx, from.Reversed())
	if reverse {
		r.phase(ctx, PhaseReadyForCutover)
	} else {
		r.phase(ctx, PhaseSwitched)
	}
	r.p.step("writes paused %s (fence to topology switch); routers held the tables %s", report.WritePause(), report.BufferHeld())
	return nil
}

// beforeSwitch runs the cutover up to and including the topology switch.
func (r *reshard) beforeSwitch(ctx workflow.Context, in *CutoverInput, report *CutoverReport) error {
	if err := workflow.ExecuteActivity(cutoverStep(ctx, 10*time.Second, 3, "routers hold %s", in.Plan.tableNames()), SetTableBufferActivity, *in).Get(ctx, &report.BufferSet); err != nil {
		return failed(err, "setting the table buffer")
	}
	// A lock timeout (a transaction held open on a source) is retried.
	var fence FenceResult
	if err := workflow.ExecuteActivity(cutoverStep(ctx, 10*time.Second, 3, "fence %s on %v", in.Plan.tableNames(), in.Plan.Sources), FenceSourcesActivity, *in).Get(ctx, &fence); err != nil {
		return failed(err, "fencing the sources")
	}
	in.Markers, report.Fenced = fence.Markers, fence.Fenced
	r.p.step("%v fenced at markers %v", in.Plan.Sources, fence.Markers)
	if err := r.awaitMarkers(ctx); err != nil {
		return err
	}
	var seqs map[string]int64
	if err := workflow.ExecuteActivity(cutoverStep(ctx, 30*time.Second, 3, "set the sequences of %s on %v", in.Plan.tableNames(), in.Plan.Targets), SetSequencesActivity, *in).Get(ctx, &seqs); err != nil {
		return failed(err, "setting the targets' sequences")
	}
	var terms map[string]int64
	if err := workflow.ExecuteActivity(cutoverStep(ctx, 30*time.Second, 3, "prepare reverse streams from %v", in.Plan.Targets), PrepareReverseActivity, *in).Get(ctx, &terms); err != nil {
		return failed(err, "preparing the reverse streams")
	}
	// The targets' terms from before their slots, for the reverse
	// streams; a shard's known term is kept (a slot kept from before,
	// lost in a failover since, must not pass for a new one). The map is
	// shared with every copy of the plan.
	if r.plan.Terms != nil {
		for shard, term := range terms {
			if _, ok := r.plan.Terms[shard]; !ok {
				r.plan.Terms[shard] = term
			}
		}
	}
	if r.recheck != nil {
		// A failover that began during the cutover wins: the cutover
		// backs off before its point of no return.
		if err := r.recheck(); err != nil {
			return err
		}
	}
	// Retried until it answers: a failed attempt may have written the
	// topology (its retry then finds the switch done), so only a refusal
	// (the group changed; nothing was written) may undo the fence. While
	// etcd does not answer the group's tables take no writes: the fence
	// holds, and nothing is lost.
	var sw SwitchTopologyResult
	if err := workflow.ExecuteActivity(cutoverStep(ctx, 10*time.Second, 0, "switch the topology of %s.%s to %v", in.Plan.Database, in.Plan.ShardGroup, in.Plan.Targets), SwitchTopologyActivity, *in).Get(ctx, &sw); err != nil {
		return failed(err, "switching the topology")
	}
	report.Revision, report.Switched = sw.Revision, sw.Switched
	return nil
}

// awaitMarkers waits for every forward stream to end by itself, which it
// does once it has applied its source's fence marker and with it every
// write the fenced tables took (StreamChanges).
func (r *reshard) awaitMarkers(ctx workflow.Context) error {
	ended, err := workflow.AwaitWithTimeout(ctx, cutoverMarkerWait, func() bool {
		for _, f := range r.streams {
			if !f.IsReady() {
				return false
			}
		}
		return true
	})
	if err != nil {
		return err
	}
	if !ended {
		return temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("the streams did not apply the fence's marker within %s", cutoverMarkerWait), queryCanceled, nil)
	}
	for _, src := range r.live.Sources {
		if err := r.streams[src].Get(ctx, nil); err != nil {
			return failed(err, "stream from %s before the fence's marker", src)
		}
	}
	r.stop, r.streams = nil, nil
	r.p.step("every target has applied its sources' writes up to the fence")
	return nil
}

// afterSwitch unfences the targets (a ReverseTraffic fenced them; for
// the first SwitchTraffic there is nothing to drop), waits, bounded, for
// the routers and ends the buffer. Routers hold the tables' statements
// until then, and treat a fence's refusal as "plan again". A failure
// here changes no data: the buffer ends by itself after cutoverBufferFor.
func (r *reshard) afterSwitch(ctx workflow.Context, in CutoverInput, report *CutoverReport) {
	to := in
	to.Plan = in.Plan.Reversed()
	if err := workflow.ExecuteActivity(cutoverStep(ctx, 30*time.Second, 20, "unfence %s on %v", in.Plan.tableNames(), in.Plan.Targets), UnfenceSourcesActivity, to).Get(ctx, nil); err != nil {
		r.p.step("unfencing %v: %s; they refuse writes until it is done", in.Plan.Targets, errText(err))
	}
	in.Revision = report.Revision
	var waited WaitRoutersResult
	if err := workflow.ExecuteActivity(cutoverStep(ctx, cutoverRouterWait+10*time.Second, 3, "wait for every router to route by the new topology"), WaitRoutersActivity, in).Get(ctx, &waited); err != nil {
		r.p.step("waiting for the routers: %s", errText(err))
	}
	report.RoutersWaiting = waited.Waiting
	if len(waited.Waiting) > 0 {
		r.p.step("routers %v had not applied revision %d after %s; the fence refuses their writes", waited.Waiting, report.Revision, cutoverRouterWait)
	}
	if err := workflow.ExecuteActivity(cutoverStep(ctx, 10*time.Second, 5, "routers release %s", in.Plan.tableNames()), ClearTableBufferActivity, in).Get(ctx, &report.BufferCleared); err != nil {
		r.p.step("clearing the table buffer: %s (it ends by itself after %s)", errText(err), cutoverBufferFor)
	}
}

// undoFence gives the sources their writes back and ends the buffer.
func (r *reshard) undoFence(ctx workflow.Context, in CutoverInput) error {
	dctx, _ := workflow.NewDisconnectedContext(ctx)
	if err := workflow.ExecuteActivity(cutoverStep(dctx, 30*time.Second, 10, "undo: unfence %s on %v", in.Plan.tableNames(), in.Plan.Sources), UnfenceSourcesActivity, in).Get(dctx, nil); err != nil {
		return err
	}
	if err := workflow.ExecuteActivity(cutoverStep(dctx, 10*time.Second, 10, "undo: routers release %s", in.Plan.tableNames()), ClearTableBufferActivity, in).Get(dctx, nil); err != nil {
		return err
	}
	r.p.step("cutover undone: sources unfenced, table buffer cleared")
	return nil
}

// switched waits, reverse streams running, for Complete or
// ReverseTraffic.
func (r *reshard) switched(ctx workflow.Context) error {
	for {
		requested, err := workflow.AwaitWithTimeout(ctx, readyLagPoll, func() bool { return r.want != "" })
		if err != nil {
			return err
		}
		if !requested {
			if err := r.idle(ctx); err != nil && !r.reverseBroke(ctx, err) {
				return err
			}
			continue
		}
		if served, err := r.serveVDiff(ctx); served {
			if err != nil {
				return err
			}
			continue
		}
		if r.want == ReverseTrafficUpdate {
			r.reply = r.cutover(ctx, r.plan.Reversed())
			r.want = ""
			if !r.switchedNow() {
				return r.ready(ctx)
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			continue
		}
		r.reply = r.complete(ctx)
		r.want = ""
		if r.reply == nil {
			// Let Complete's caller have its answer before the run ends.
			return workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) })
		}
	}
}

// complete stops the reverse streams and drops everything the reshard
// made, and the moved rows from the sources. A failure leaves the
// streams stopped; Complete may be asked again (each step is idempotent).
//
// It refuses while a live router still routes by a topology older than
// the cutover's: Complete drops the sources' fence, and such a router's
// writes would then commit on a source that nobody reads any more.
func (r *reshard) complete(ctx workflow.Context) error {
	in := r.cutoverInput(ctx, r.plan)
	in.Revision = r.prog.Cutover.Revision
	var waited WaitRoutersResult
	if err := workflow.ExecuteActivity(cutoverStep(ctx, cutoverRouterWait+10*time.Second, 3,
		"check every router routes by topology revision %d", in.Revision), WaitRoutersActivity, in).Get(ctx, &waited); err != nil {
		return failed(err, "checking the routers before Complete")
	}
	if len(waited.Waiting) > 0 {
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
			"routers %v still route by a topology older than revision %d: Complete would drop the fence that refuses their writes on the sources; restart or fix them, then ask Complete again",
			waited.Waiting, in.Revision), pgerr.ObjectNotInPrerequisiteState, nil)
	}
	if err := r.stopStreams(ctx); err != nil {
		r.p.step("%s", errText(err))
	}
	opts := cleanupOptions
	opts.HeartbeatTimeout = 0
	opts.StartToCloseTimeout = 30 * time.Minute
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), CompleteReshardActivity, r.plan).Get(ctx, nil); err != nil {
		return failed(err, "completing the reshard")
	}
	r.phase(ctx, PhaseCompleted)
	moved := "the sources' moved rows are deleted"
	switch {
	case r.plan.Imports():
		moved = "the external Postgres keeps its tables, unfenced"
	case r.plan.MovesTables():
		moved = "the moved tables are dropped from the sources"
	}
	r.p.step("completed: nothing of %s is left on any instance; %s", r.plan.Key, moved)
	return nil
}

// reverseBroke takes a reverse stream's failure for a target's failover
// (IsSourceFailover): its slot is lost with the old primary, so the
// sources will lack the targets' later writes. The movement does not
// fail (the targets serve, and must keep serving): it reports why,
// stops the reverse streams, refuses ReverseTraffic from now on
// (allowed) and still ends by Complete. Any other error is not its.
func (r *reshard) reverseBroke(ctx workflow.Context, err error) bool {
	if !IsSourceFailover(err) || workflow.GetVersion(ctx, "reverse-stream-failover", workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return false
	}
	r.prog.ReverseBroken = errText(err)
	r.prog.Error = r.prog.ReverseBroken
	r.p.step("the reverse streams stop: %s; ReverseTraffic is refused (the sources lack the targets' later writes); Complete ends the movement", r.prog.ReverseBroken)
	if serr := r.stopStreams(ctx); serr != nil {
		r.p.step("%s", errText(serr))
	}
	return true
}
