package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/store"
)

// bufferFor is how long a switchover asks routers to hold the shard's
// statements at most; routers let them go by themselves after that, so
// a switchover that stalls cannot stall its clients for longer.
const bufferFor = 10 * time.Second

// parallelSteps is the workflow version from which a switchover repoints
// the replicas and restores durability side by side.
const parallelSteps = "switchover-parallel-repoint-durability"

// localSteps is the workflow version from which a switchover runs the
// short steps of its pause as local activities (calls.go) and sets the
// durability policy on the candidate alongside its promotion: each
// activity round trip through the server cost 50-150 ms of the pause on
// a busy 2-core machine (docs/operations.md has the figures).
const localSteps = "switchover-local-steps"

// bufferReason marks the buffer signal as a switchover's.
const bufferReason = "switchover"

// SwitchoverInput asks for a shard's healthy primary to hand over to a
// replica: Candidate, or the best one when empty.
type SwitchoverInput struct {
	Shard     string
	Candidate string
}

// SwitchoverResult says what a switchover did. PauseMillis is how long
// routers were asked to hold the shard's statements, by the workers'
// clocks.
type SwitchoverResult struct {
	OldPrimary, NewPrimary string
	Term                   int64
	PauseMillis            int64
	Steps                  []string
}

// Switchover moves a healthy shard's primary to a replica without losing
// a commit: routers hold the shard's new statements, the old primary is
// fenced, the candidate replays everything the old primary wrote and is
// promoted and published; once the other replicas follow it and the
// durability policy holds on it, routers resume, and the old primary is
// rewound into a replica. If anything fails before the new primary is
// published, the old primary is made writable again and the buffer
// signal cleared.
func Switchover(ctx workflow.Context, in SwitchoverInput) (SwitchoverResult, error) {
	p, err := track(ctx)
	if err != nil {
		return SwitchoverResult{}, err
	}
	if in.Shard == "" {
		return SwitchoverResult{}, activities.Refuse(pgerr.InvalidParameterValue, "a shard is required")
	}
	end, err := beginOperation(ctx, in.Shard, OpSwitchover)
	if err != nil {
		return SwitchoverResult{}, err
	}
	defer end()
	op := watchShardOp(ctx, p, "Switchover", in.Shard)
	p.step("inspecting shard %s", in.Shard)
	view, err := inspect(ctx, in.Shard)
	if err != nil {
		return SwitchoverResult{}, failed(err, "inspecting shard %s", in.Shard)
	}
	old := primaryOf(view)
	if ov, ok := view.Instance(old); !ok || !ov.Serving || ov.Role != store.RolePrimary {
		return SwitchoverResult{}, activities.Refuse(pgerr.ObjectNotInPrerequisiteState,
			"shard %s has no serving primary to switch over from (recorded: %q); use Failover", in.Shard, old)
	}
	cand, err := switchoverCandidate(view, old, in.Candidate)
	if err != nil {
		return SwitchoverResult{}, err
	}
	res := SwitchoverResult{OldPrimary: old, NewPrimary: cand, Term: view.State.Term}

	// Switchovers started before localSteps replay as they ran: every
	// step an activity of its own, durability restored after the
	// publication.
	useLocal := workflow.GetVersion(ctx, localSteps, workflow.DefaultVersion, 1) != workflow.DefaultVersion
	run := remote
	if useLocal {
		run = local
	}

	op.enter(ctx, PhaseDraining)
	p.step("asking routers to hold shard %s's statements", in.Shard)
	bufferedAt, err := setBuffer(ctx, run, in.Shard, bufferReason)
	if err != nil {
		return SwitchoverResult{}, failed(err, "setting the buffer signal of shard %s", in.Shard)
	}
	fenced := false
	// undo returns the shard to its old primary; it runs even when the
	// workflow is cancelled.
	undo := func(cause error, format string, args ...any) (SwitchoverResult, error) {
		uctx, _ := workflow.NewDisconnectedContext(ctx)
		op.enter(uctx, PhaseUndoing)
		defer op.enter(uctx, PhaseFailed)
		if fenced {
			p.step("unfencing %s", old)
			if err := unfence(uctx, in.Shard, old); err != nil {
				p.step("could not unfence %s: %s", old, errText(err))
			}
		}
		p.step("letting routers resume shard %s", in.Shard)
		if _, err := clearBuffer(uctx, remote, in.Shard, bufferReason); err != nil {
			p.step("could not clear the buffer signal: %s", errText(err))
		}
		return SwitchoverResult{}, failed(cause, format, args...)
	}

	p.step("letting transactions open on %s finish (up to %s)", old, drainWait)
	if open, err := drain(ctx, run, in.Shard, old); err != nil {
		p.step("could not count open transactions on %s (%s); going on", old, errText(err))
	} else if open > 0 {
		p.step("%d transactions still open on %s end with the fence", open, old)
	}
	op.enter(ctx, PhaseFencing)
	p.step("fencing old primary %s", old)
	// Set before the call: a fence whose answer was lost still fenced.
	fenced = true
	fr, err := fence(ctx, run, normal, in.Shard, old)
	if err != nil {
		return undo(err, "fencing %s", old)
	}
	if fr.CurrentLSN == 0 {
		return undo(activities.Refuse(pgerr.ObjectNotInPrerequisiteState, "%s reported no WAL position", old), "fencing %s", old)
	}
	op.enter(ctx, PhaseReplaying)
	p.step("waiting for %s to replay up to %s", cand, fr.CurrentLSN)
	if err := waitForReplay(ctx, run, in.Shard, cand, fr.CurrentLSN); err != nil {
		return undo(err, "waiting for %s to replay up to %s", cand, fr.CurrentLSN)
	}
	// Promotion is the first step after which the steps before it
	// could not run again: it is an activity (retried, also on another
	// worker, and harmless to repeat), and scheduling it records the
	// local steps before it. Until then a worker that died leaves them
	// to run again from the buffer on, which is harmless: the buffer is
	// set anew, the drain is refused by the fenced sidecar and skipped,
	// the fence is a no-op answering the old primary's position, which
	// the candidate, still streaming from it, replays.
	// The steps after the promotion up to the buffer's clearing are
	// local too, and as harmless to run again from the promotion on:
	// the candidate is found published already, a replica already
	// following it is left streaming, a cleared buffer stays cleared.
	var durability workflow.Future
	if useLocal {
		// synchronous_standby_names does nothing on a replica and is
		// in effect from the promotion on, so setting it alongside the
		// promotion takes it off the pause without a moment in which
		// the new primary acknowledges commits alone; if the switchover
		// is undone, the candidate stays a replica, where it is inert.
		p.step("setting %s durability on %s, in effect from its promotion", view.State.Durability.OrDefault(), cand)
		durability = startDurability(ctx, in.Shard, cand)
	}
	op.enter(ctx, PhasePromoting)
	p.step("promoting %s", cand)
	if err := promote(ctx, in.Shard, cand); err != nil {
		awaitStarted(ctx, durability)
		return undo(err, "promoting %s", cand)
	}
	op.enter(ctx, PhasePublishing)
	p.step("publishing %s as the primary of shard %s", cand, in.Shard)
	st, err := publish(ctx, run, activities.PublishInput{Shard: in.Shard, Primary: cand, Expected: view.State.Primary})
	if err != nil {
		// Routers still write to the old primary: give it back its
		// writes; RepairShard rejoins the promoted candidate.
		awaitStarted(ctx, durability)
		return undo(err, "publishing %s", cand)
	}
	res.Term = st.Term

	// From here on the new primary stands; failures are reported, not
	// undone.
	// Routers resume only once the other replicas follow the new primary
	// and its durability policy holds (a commit waits for a synchronous
	// standby streaming from it). Neither step needs the other, so since
	// parallelSteps they run side by side, which shortens the pause by
	// the shorter of the two; the version keeps switchovers started
	// before it replaying as they ran. Since localSteps the durability
	// step started before the promotion.
	op.enter(ctx, PhaseRepointing)
	var names string
	var durErr error
	switch {
	case useLocal:
		repoint(ctx, run, p, in.Shard, view, cand, old)
		names, durErr = awaitDurability(ctx, durability)
	case workflow.GetVersion(ctx, parallelSteps, workflow.DefaultVersion, 1) == workflow.DefaultVersion:
		repoint(ctx, remote, p, in.Shard, view, cand, old)
		p.step("restoring %s durability on %s", view.State.Durability.OrDefault(), cand)
		names, durErr = applyDurability(ctx, in.Shard, cand)
	default:
		p.step("restoring %s durability on %s", view.State.Durability.OrDefault(), cand)
		durability := startDurability(ctx, in.Shard, cand)
		repoint(ctx, remote, p, in.Shard, view, cand, old)
		names, durErr = awaitDurability(ctx, durability)
	}
	if durErr == nil {
		p.step("synchronous_standby_names on %s is %q", cand, names)
	}
	// The old primary's rejoin restarts it, which routers need not wait
	// for: they resume before it.
	op.enter(ctx, PhaseResuming)
	p.step("letting routers resume shard %s", in.Shard)
	resumedAt, err := clearBuffer(ctx, run, in.Shard, bufferReason)
	if err != nil {
		return SwitchoverResult{}, failed(err, "%s is the primary (term %d) but the buffer signal was not cleared (routers resume at its deadline)", cand, st.Term)
	}
	res.PauseMillis = resumedAt.Sub(bufferedAt).Milliseconds()
	if durErr != nil {
		return SwitchoverResult{}, failed(durErr, "%s is the primary (term %d) but its durability policy is not restored", cand, st.Term)
	}
	op.enter(ctx, PhaseRejoining)
	if err := rejoinAsReplica(ctx, p, in.Shard, old, cand, false); err != nil {
		return SwitchoverResult{}, failed(err, "%s is the primary (term %d) but %s has not rejoined; start Rejoin", cand, st.Term, old)
	}
	op.enter(ctx, PhaseDone)
	res.Steps = p.steps
	return res, nil
}

// awaitStarted waits for a step started alongside others, if one was,
// whatever its outcome: a workflow that ends leaves none running.
func awaitStarted(ctx workflow.Context, f workflow.Future) {
	if f != nil {
		_ = f.Get(ctx, nil)
	}
}

// switchoverCandidate checks the asked-for candidate, or picks one.
func switchoverCandidate(view activities.ShardView, old, asked string) (string, error) {
	if asked == "" {
		c, err := chooseCandidate(view, candidateRules{
			exclude:   old,
			preferred: activities.SyncStandbys(view.State.Durability, old, view.Members()),
			maxLag:    DefaultMaxLagBytes,
		})
		return c.ID, err
	}
	c, ok := view.Instance(asked)
	if !ok || asked == old || !c.Serving || c.Role != store.RoleReplica {
		return "", activities.Refuse(pgerr.InvalidParameterValue, "%s is not a serving replica of shard %s", asked, view.State.Shard)
	}
	return asked, nil
}
