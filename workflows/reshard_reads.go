package workflows

import (
	"fmt"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/pgerr"
)

// A reads-first SwitchTraffic: {"traffic":"reads"} moves only the group's
// replica reads to the targets, by the group's replica key ranges in the
// topology (a MoveTables': its tables' replica_reads bindings;
// SwitchReplicaReads), as Vitess switches replica and rdonly
// reads before primary writes. Nothing is fenced or buffered: the sources
// keep every write and primary read, and the forward streams keep the
// targets (and so their replicas) current. The phase stays
// ready_for_cutover; the progress shows ReadsSwitched. A SwitchTraffic of
// writes then moves the rest, ReverseTraffic {"traffic":"reads"} or
// Cancel put replica reads back on the sources.

// requestTraffic is request for SwitchTraffic and ReverseTraffic, which
// take a TrafficInput.
func (r *reshard) requestTraffic(name string) func(workflow.Context, TrafficInput) error {
	return func(ctx workflow.Context, in TrafficInput) error { return r.requestWith(name, in.Reads())(ctx) }
}

// trafficAllowed refuses a SwitchTraffic or ReverseTraffic that cannot
// run now.
func (r *reshard) trafficAllowed(name string, in TrafficInput) error {
	switch in.Traffic {
	case "", TrafficWrites, TrafficReads:
	default:
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: traffic %q is neither %q nor %q", name, in.Traffic, TrafficReads, TrafficWrites),
			pgerr.InvalidParameterValue, nil)
	}
	if !in.Reads() {
		phase := PhaseReadyForCutover
		if name == ReverseTrafficUpdate {
			phase = PhaseSwitched
		}
		err := r.allowed(name, phase)
		if err != nil && name == ReverseTrafficUpdate && r.want == "" && r.prog.ReadsSwitched != nil {
			return temporal.NewNonRetryableApplicationError(`only replica reads are switched: ReverseTraffic {"traffic":"reads"} puts them back`,
				pgerr.ObjectNotInPrerequisiteState, nil)
		}
		return err
	}
	if err := r.allowed(name, PhaseReadyForCutover); err != nil {
		return err
	}
	if r.plan.Imports() {
		return temporal.NewNonRetryableApplicationError("an import's source has no replicas the routers know: it switches reads and writes together (SwitchTraffic without traffic reads)",
			pgerr.FeatureNotSupported, nil)
	}
	switch on := r.prog.ReadsSwitched != nil; {
	case name == SwitchTrafficUpdate && on:
		return temporal.NewNonRetryableApplicationError("replica reads are already switched to the targets: SwitchTraffic moves the writes next",
			pgerr.ObjectNotInPrerequisiteState, nil)
	case name == ReverseTrafficUpdate && !on:
		return temporal.NewNonRetryableApplicationError("replica reads are not switched: there is nothing to reverse",
			pgerr.ObjectNotInPrerequisiteState, nil)
	}
	return nil
}

// switchReads moves replica reads to the targets (on) or back. Switching
// on needs what a cutover needs of the streams: running, a clean VDiff,
// within the lag bound; the activity refuses a target without a live
// replica. It then waits, bounded, for the routers (waitReadRouters).
func (r *reshard) switchReads(ctx workflow.Context, on bool) error {
	if on {
		if d := r.prog.LastDiff; d == nil || !d.Done || d.Differences != 0 {
			return temporal.NewNonRetryableApplicationError("the last VDiff is not clean: switching reads needs one with no differences",
				pgerr.ObjectNotInPrerequisiteState, nil)
		}
		if r.streams == nil {
			return temporal.NewNonRetryableApplicationError("the streams are stopped: replica reads on the targets would fall behind",
				pgerr.ObjectNotInPrerequisiteState, nil)
		}
		if err := r.streamFailed(ctx); err != nil {
			return err
		}
		var check CheckCutoverResult
		if err := workflow.ExecuteActivity(cutoverStep(ctx, 30*time.Second, 1, "check the streams from %v before switching reads", r.plan.Sources),
			CheckCutoverActivity, r.cutoverInput(ctx, r.plan)).Get(ctx, &check); err != nil {
			return failed(err, "checking the streams before switching reads")
		}
	}
	to := r.plan.Sources
	if on {
		to = r.plan.Targets
	}
	var sw SwitchTopologyResult
	if err := workflow.ExecuteActivity(cutoverStep(ctx, 10*time.Second, 5, "switch replica reads of %s.%s to %v", r.plan.Database, r.plan.ShardGroup, to),
		SwitchReplicaReadsActivity, ReadsInput{Plan: r.plan, On: on}).Get(ctx, &sw); err != nil {
		return failed(err, "switching replica reads")
	}
	waiting := r.waitReadRouters(ctx, sw.Revision)
	if on {
		r.prog.ReadsSwitched = &ReadsSwitch{Revision: sw.Revision, Switched: sw.Switched, RoutersWaiting: waiting}
		r.p.step("topology revision %d routes replica reads of the group to %v; writes stay on %v", sw.Revision, r.plan.Targets, r.plan.Sources)
	} else {
		r.prog.ReadsSwitched = nil
		r.p.step("topology revision %d routes replica reads of the group back to %v", sw.Revision, r.plan.Sources)
	}
	return nil
}

// undoReads puts replica reads switched alone back on the sources before
// a cancelled or failed movement drops the targets' copy.
func (r *reshard) undoReads(ctx workflow.Context) error {
	if r.prog.ReadsSwitched == nil {
		return nil
	}
	var sw SwitchTopologyResult
	if err := workflow.ExecuteActivity(cutoverStep(ctx, 10*time.Second, 20, "undo: replica reads of %s.%s back to %v", r.plan.Database, r.plan.ShardGroup, r.plan.Sources),
		SwitchReplicaReadsActivity, ReadsInput{Plan: r.plan}).Get(ctx, &sw); err != nil {
		return failed(err, "switching replica reads back")
	}
	r.prog.ReadsSwitched = nil
	r.p.step("topology revision %d routes replica reads of the group back to %v", sw.Revision, r.plan.Sources)
	r.waitReadRouters(ctx, sw.Revision)
	return nil
}

// waitReadRouters waits, bounded, for every router to route by revision
// and returns those that had not. One that has not yet sends replica reads
// where the previous revision did, whose shards hold every row: that is
// reported, not failed.
func (r *reshard) waitReadRouters(ctx workflow.Context, revision int64) []string {
	in := r.cutoverInput(ctx, r.plan)
	in.Revision = revision
	var waited WaitRoutersResult
	if err := workflow.ExecuteActivity(cutoverStep(ctx, cutoverRouterWait+10*time.Second, 3, "wait for every router to route by topology revision %d", revision),
		WaitRoutersActivity, in).Get(ctx, &waited); err != nil {
		r.p.step("waiting for the routers: %s", errText(err))
	}
	if len(waited.Waiting) > 0 {
		r.p.step("routers %v had not applied revision %d after %s: their replica reads still go to the previous shards", waited.Waiting, revision, cutoverRouterWait)
	}
	return waited.Waiting
}
