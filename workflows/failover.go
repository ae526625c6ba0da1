package workflows

import (
	"cmp"
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/pgerr"
)

// catchUpWait is how long a failover waits for a replica to replay all
// received WAL before promoting the one that received the most; a ready
// replica promotes at once, a lagging one first replays what it has.
const catchUpWait = 2 * time.Second

// catchUpPoll is how often it looks again meanwhile.
const catchUpPoll = 500 * time.Millisecond

// FailoverInput asks for a shard's primary to be replaced.
type FailoverInput struct {
	Shard string
	// Force fails over even when the primary is healthy, and promotes a
	// replica beyond the lag bound if no other is left.
	Force  bool
	Reason string
	// MaxLagBytes bounds the WAL a candidate may have left to replay;
	// 0 means DefaultMaxLagBytes.
	MaxLagBytes uint64
}

// FailoverResult says what a failover did. When the primary was healthy
// and nothing was done, NewPrimary equals OldPrimary and Steps says so.
type FailoverResult struct {
	OldPrimary, NewPrimary string
	Term                   int64
	Steps                  []string
}

// Failover replaces a shard's primary that is gone or unwell: it fences
// the old primary if it can still be reached, promotes the replica that
// has the most WAL (preferring one that replayed it all and the policy's
// synchronous standbys), publishes it in ShardState with the next term,
// points the other replicas at it and restores the durability policy on
// it. The old primary rejoins later, by Rejoin or RepairShard: Failover
// does not wait for an instance that may never come back.
func Failover(ctx workflow.Context, in FailoverInput) (FailoverResult, error) {
	p, err := track(ctx)
	if err != nil {
		return FailoverResult{}, err
	}
	if in.Shard == "" {
		return FailoverResult{}, activities.Refuse(pgerr.InvalidParameterValue, "a shard is required")
	}
	end, err := beginOperation(ctx, in.Shard, OpFailover)
	if err != nil {
		return FailoverResult{}, err
	}
	defer end()
	op := watchShardOp(ctx, p, "Failover", in.Shard)
	if in.Reason != "" {
		p.step("failover of shard %s: %s", in.Shard, in.Reason)
	}
	p.step("inspecting shard %s", in.Shard)
	view, err := inspect(ctx, in.Shard)
	if err != nil {
		return FailoverResult{}, failed(err, "inspecting shard %s", in.Shard)
	}
	old := primaryOf(view)
	res := FailoverResult{OldPrimary: old, Term: view.State.Term}
	done := func() (FailoverResult, error) { op.enter(ctx, PhaseDone); res.Steps = p.steps; return res, nil }

	ov, known := view.Instance(old)
	if known && ov.Reachable && ov.Writable && !in.Force {
		p.step("primary %s is healthy and writable: nothing to do (Force fails over anyway)", old)
		res.NewPrimary = old
		return done()
	}
	switch {
	case old == "":
		p.step("shard %s has no known primary", in.Shard)
	case known && ov.Reachable && !ov.Serving:
		// Its sidecar answers but its Postgres does not (hung, or down
		// and restarting): a fence, which is SQL, would only wait out its
		// timeout. Routers write only to the recorded primary, about to
		// change, and the sidecar closes its connections once it does.
		p.step("old primary %s does not answer its sidecar; not fenced", old)
	case known && ov.Reachable:
		op.enter(ctx, PhaseFencing)
		p.step("fencing old primary %s", old)
		if _, err := fence(ctx, remote, quick, in.Shard, old); err != nil {
			// Routers write only to the recorded primary, which is
			// about to change, so an unfenced old primary gets no writes.
			p.step("could not fence old primary %s (%s); going on", old, errText(err))
		}
	default:
		p.step("old primary %s is unreachable; not fenced", old)
	}

	rules := candidateRules{
		exclude:   old,
		preferred: activities.SyncStandbys(view.State.Durability, old, view.Members()),
		maxLag:    cmp.Or(in.MaxLagBytes, DefaultMaxLagBytes),
		force:     in.Force,
	}
	cand, err := chooseCandidate(view, rules)
	if err == nil && !cand.ready {
		op.enter(ctx, PhaseReplaying)
		p.step("waiting up to %s for a replica to replay all WAL received", catchUpWait)
		deadline := workflow.Now(ctx).Add(catchUpWait)
		for err == nil && !cand.ready && workflow.Now(ctx).Before(deadline) {
			if err := sleep(ctx, catchUpPoll, "wait for a replica of shard %s to replay", in.Shard); err != nil {
				return FailoverResult{}, err
			}
			if view, err = inspect(ctx, in.Shard); err != nil {
				return FailoverResult{}, failed(err, "inspecting shard %s", in.Shard)
			}
			cand, err = chooseCandidate(view, rules)
		}
	}
	if err != nil {
		return FailoverResult{}, err
	}

	op.enter(ctx, PhasePromoting)
	p.step("promoting %s (replayed %s of %s received)", cand.ID, cand.ReplayLSN, cand.Held())
	if err := promote(ctx, in.Shard, cand.ID); err != nil {
		return FailoverResult{}, failed(err, "promoting %s", cand.ID)
	}
	op.enter(ctx, PhasePublishing)
	p.step("publishing %s as the primary of shard %s", cand.ID, in.Shard)
	st, err := publish(ctx, remote, activities.PublishInput{Shard: in.Shard, Primary: cand.ID, Expected: view.State.Primary})
	if err != nil {
		return FailoverResult{}, failed(err, "%s is promoted but not published as primary (RepairShard will fence and rejoin it)", cand.ID)
	}
	res.NewPrimary, res.Term = cand.ID, st.Term

	op.enter(ctx, PhaseRepointing)
	repoint(ctx, remote, p, in.Shard, view, cand.ID, old)
	p.step("restoring %s durability on %s", view.State.Durability.OrDefault(), cand.ID)
	names, err := applyDurability(ctx, in.Shard, cand.ID)
	if err != nil {
		return FailoverResult{}, failed(err, "%s is the primary (term %d) but its durability policy is not restored", cand.ID, st.Term)
	}
	p.step("synchronous_standby_names on %s is %q", cand.ID, names)
	if old != "" {
		p.step("%s is primary at term %d; old primary %s rejoins as a replica by Rejoin (workflow id %s) or RepairShard", cand.ID, st.Term, old, RejoinID(old))
	}
	return done()
}

// repoint points the shard's other serving replicas at a new primary. A
// replica that cannot follow is left for RepairShard, which rewinds it.
func repoint(ctx workflow.Context, run runner, p *progress, shard string, view activities.ShardView, primary, old string) {
	for _, in := range view.Instances {
		if in.ID == primary || in.ID == old {
			continue
		}
		if !in.Reachable {
			p.step("replica %s is unreachable; RepairShard will repoint it", in.ID)
			continue
		}
		p.step("pointing %s at %s", in.ID, primary)
		if err := follow(ctx, run, shard, in.ID, primary); err != nil {
			p.step("could not repoint %s (%s); RepairShard will", in.ID, errText(err))
		}
	}
}

// primaryOf is the shard's recorded primary or, when none is recorded
// yet, the one instance that reports being an unfenced primary.
func primaryOf(view activities.ShardView) string {
	if view.State.Primary != "" {
		return view.State.Primary
	}
	if reported := view.ReportedPrimaries(); len(reported) == 1 {
		return reported[0]
	}
	return ""
}
