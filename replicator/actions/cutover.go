package actions

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pglogrepl"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// routerPoll is how often WaitRouters reads the routers' records.
const routerPoll = 100 * time.Millisecond

// CheckCutover checks, changing nothing, that the streams are close
// enough for a short cutover: each slot within MaxLagBytes of its source,
// and each stream confirming the source's current position within
// MaxCatchUp (that time bounds the catch-up the cutover waits for while
// writes are held). A stream confirms every second
// (replicator.DefaultStatusInterval), so MaxCatchUp must be larger.
// Too far behind is refused (55000): the operator tries again later.
func (a *Actions) CheckCutover(ctx context.Context, in workflows.CutoverInput) (workflows.CheckCutoverResult, error) {
	defer beating(ctx, noDetails)()
	a = a.forPlan(in.Plan)
	res := workflows.CheckCutoverResult{CatchUpSeconds: map[string]float64{}}
	lag, err := a.StreamLag(ctx, in.Plan)
	if err != nil {
		return res, err
	}
	res.Sources = lag.Sources
	for _, s := range lag.Sources {
		if s.LagBytes > in.MaxLagBytes {
			return res, refuse(pgerr.ObjectNotInPrerequisiteState, "the stream from %s is %d bytes behind (at most %d for a cutover): try again later", s.Source, s.LagBytes, in.MaxLagBytes)
		}
	}
	for _, src := range in.Plan.Sources {
		took, err := a.timeCatchUp(ctx, in.Plan, src, in.MaxCatchUp)
		if err != nil {
			return res, err
		}
		res.CatchUpSeconds[src] = took.Seconds()
	}
	return res, nil
}

// timeCatchUp measures how long the stream from src takes to confirm the
// source's WAL position as it is now.
func (a *Actions) timeCatchUp(ctx context.Context, plan workflows.ReshardPlan, src string, limit time.Duration) (time.Duration, error) {
	conn, _, err := a.connect(ctx, src, plan.Database)
	if err != nil {
		return 0, err
	}
	defer closeAll(conn)
	var now pglogrepl.LSN
	if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&now); err != nil {
		return 0, activityError(err)
	}
	start := time.Now()
	for {
		var confirmed pglogrepl.LSN
		if err := conn.QueryRow(ctx, "SELECT confirmed_flush_lsn::text FROM pg_replication_slots WHERE slot_name = $1",
			plan.Slot(src)).Scan(&confirmed); err != nil {
			return 0, activityError(fmt.Errorf("slot %s on %s: %w", plan.Slot(src), src, err))
		}
		took := time.Since(start)
		if confirmed >= now {
			return took, nil
		}
		if took > limit {
			return took, refuse(pgerr.ObjectNotInPrerequisiteState, "the stream from %s did not confirm the source's position within %s (at %s of %s): try again later", src, limit, confirmed, now)
		}
		select {
		case <-ctx.Done():
			return took, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// SetTableBuffer asks routers to hold new statements on the plan's
// tables for in.BufferFor, and returns when it was set.
func (a *Actions) SetTableBuffer(ctx context.Context, in workflows.CutoverInput) (time.Time, error) {
	defer beating(ctx, noDetails)()
	b := store.TableBuffer{ID: in.BufferID, Database: in.Plan.Database, For: in.BufferFor, Set: time.Now(),
		Reason: fmt.Sprintf("cutover of shard group %s (%s)", in.Plan.ShardGroup, in.Plan.Key)}
	for _, t := range in.Plan.Tables {
		b.Tables = append(b.Tables, t.DisplayName())
	}
	if err := a.Store.SetTableBuffer(ctx, b); err != nil {
		return time.Time{}, activityError(err)
	}
	return b.Set, nil
}

// ClearTableBuffer ends the routers' hold, and returns when.
func (a *Actions) ClearTableBuffer(ctx context.Context, in workflows.CutoverInput) (time.Time, error) {
	defer beating(ctx, noDetails)()
	if err := a.Store.ClearTableBuffer(ctx, in.BufferID); err != nil {
		return time.Time{}, activityError(err)
	}
	return time.Now(), nil
}

// SwitchTopology is the cutover's point of no return: it stores the
// topology with the group's key ranges on the targets, as a
// compare-and-swap on the revision it reads, and only if the group's key
// ranges there are still the plan's sources'. A retry that finds them
// already the targets' (its earlier attempt's write succeeded) returns
// that revision.
//
// A MoveTables' plan moves its tables' placements instead (switchTables).
func (a *Actions) SwitchTopology(ctx context.Context, in workflows.CutoverInput) (workflows.SwitchTopologyResult, error) {
	defer beating(ctx, noDetails)()
	plan := in.Plan
	if plan.MovesTables() {
		return a.switchTables(ctx, plan)
	}
	snap, err := a.Store.GetTopology(ctx)
	if err != nil {
		return workflows.SwitchTopologyResult{}, activityError(err)
	}
	current, ok := snap.Topology.Group(plan.ShardGroup)
	if !ok {
		return workflows.SwitchTopologyResult{}, refuse(pgerr.UndefinedObject, "shard group %s is no longer in the topology", plan.ShardGroup)
	}
	before, err := groupRanges(plan.SourceTopology, plan.ShardGroup)
	if err != nil {
		return workflows.SwitchTopologyResult{}, err
	}
	after, err := groupRanges(plan.TargetTopology, plan.ShardGroup)
	if err != nil {
		return workflows.SwitchTopologyResult{}, err
	}
	if sameRanges(current.KeyRanges, after) {
		return workflows.SwitchTopologyResult{Revision: snap.Revision, Switched: time.Now()}, nil
	}
	if !sameRanges(current.KeyRanges, before) {
		return workflows.SwitchTopologyResult{}, refuse(pgerr.ObjectNotInPrerequisiteState,
			"shard group %s's key ranges changed since the reshard was planned: nothing is switched", plan.ShardGroup)
	}
	inputs := make([]workflows.KeyRangeInput, len(after))
	for i, r := range after {
		inputs[i] = workflows.KeyRangeInput{ShardUID: r.ShardUID, Start: r.Start, End: r.End}
	}
	// The rest of the stored topology may have changed since the plan:
	// only the group's ranges are replaced.
	doc, err := targetTopology(snap.Topology, plan.ShardGroup, inputs)
	if err != nil {
		return workflows.SwitchTopologyResult{}, err
	}
	next, err := topo.Parse(doc)
	if err != nil {
		return workflows.SwitchTopologyResult{}, activityError(err)
	}
	return a.applySwitch(ctx, next, snap.Revision)
}

// applySwitch stores the switched topology if the stored one is still at
// revision.
func (a *Actions) applySwitch(ctx context.Context, next *topo.Topology, revision int64) (workflows.SwitchTopologyResult, error) {
	// Force bypasses the placement guard, which refuses exactly this: a
	// topology that moves tables. Here the rows have moved (the targets
	// hold every write the fenced sources acknowledged), which is what
	// the guard protects; the compare-and-swap on the revision read above
	// keeps any other change from being overwritten.
	rev, err := a.Store.ApplyTopology(ctx, next, store.ApplyOptions{ExpectedRevision: revision, Force: true})
	if err != nil {
		// A revision mismatch (40001) is retried: the next attempt reads
		// the new revision and checks the group again.
		return workflows.SwitchTopologyResult{}, activityError(err)
	}
	return workflows.SwitchTopologyResult{Revision: rev, Switched: time.Now()}, nil
}

// groupRanges reads a group's key ranges from a topology document.
func groupRanges(doc []byte, group string) ([]topo.KeyRange, error) {
	t, err := topo.Parse(doc)
	if err != nil {
		return nil, activityError(err)
	}
	g, ok := t.Group(group)
	if !ok {
		return nil, refuse(pgerr.UndefinedObject, "shard group %s is not in the plan's topology", group)
	}
	return g.KeyRanges, nil
}

func sameRanges(a, b []topo.KeyRange) bool {
	return slices.EqualFunc(a, b, func(x, y topo.KeyRange) bool {
		return x.ShardUID == y.ShardUID && x.Start == y.Start && x.End == y.End
	})
}

// WaitRouters waits, at most in.RouterWait, until every live router's
// record reports topology revision in.Revision or later, and returns the
// ones that had not. With no router registered there is nothing to wait
// for. Not reaching them is no failure: the sources' fence refuses a
// stale router's writes, which it then plans again.
func (a *Actions) WaitRouters(ctx context.Context, in workflows.CutoverInput) (workflows.WaitRoutersResult, error) {
	defer beating(ctx, noDetails)()
	deadline := time.Now().Add(in.RouterWait)
	for {
		recs, err := a.Store.ListRecords(ctx, store.KindRouter)
		if err != nil {
			return workflows.WaitRoutersResult{}, activityError(err)
		}
		res := workflows.WaitRoutersResult{Routers: len(recs)}
		for _, r := range recs {
			if r.TopologyRevision < in.Revision {
				res.Waiting = append(res.Waiting, r.ID)
			}
		}
		if len(res.Waiting) == 0 || time.Now().After(deadline) {
			return res, nil
		}
		select {
		case <-ctx.Done():
			return res, ctx.Err()
		case <-time.After(routerPoll):
		}
	}
}
