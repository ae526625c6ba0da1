package actions

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pglogrepl"

	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/workflows"
)

// StreamChanges applies one source's changes to the targets until the
// workflow cancels it, or until it has applied the source's cutover fence
// marker (FenceSources), when it returns nil: every write the fenced
// tables took is then applied on the targets. One long activity per
// source, heartbeating the lag. A restarted attempt resumes from the
// targets' replication origins, so it neither skips nor re-applies a
// source transaction.
func (a *Actions) StreamChanges(ctx context.Context, in workflows.SourceInput) error {
	a = a.forPlan(in.Plan)
	if err := a.checkTerm(ctx, in.Plan, in.Source); err != nil {
		return err
	}
	s, closeConns, err := a.newStream(ctx, in.Plan, in.Source)
	if err != nil {
		return err
	}
	defer closeConns()
	s.StopAtMessage = fenceMarker(in.Plan, in.FenceGeneration)
	stop := beating(ctx, func() any {
		bytes, seconds := s.Lag()
		return workflows.StreamHeartbeat{Source: in.Source, LagBytes: bytes, LagSeconds: seconds}
	})
	defer stop()
	return streamError(ctx, a.watchTerm(ctx, in.Plan, in.Source, s.Run), in.Source)
}

// runStream runs a source's stream up to stopAt (DiffTables' consistent
// point).
func (a *Actions) runStream(ctx context.Context, plan workflows.ReshardPlan, source string, stopAt pglogrepl.LSN) error {
	s, closeConns, err := a.newStream(ctx, plan, source)
	if err != nil {
		return err
	}
	defer closeConns()
	s.StopAt = stopAt
	return streamError(ctx, a.watchTerm(ctx, plan, source, s.Run), source)
}

// streamError is a stream's end as the activity reports it.
func streamError(ctx context.Context, err error, source string) error {
	if errors.Is(err, context.Canceled) || ctx.Err() != nil {
		return ctx.Err()
	}
	if err != nil {
		return activityError(fmt.Errorf("stream from %s: %w", source, err))
	}
	return nil
}

// newStream describes the plan's tables on the source and connects to
// the targets; closeConns closes what it opened.
func (a *Actions) newStream(ctx context.Context, plan workflows.ReshardPlan, source string) (_ *replicator.Stream, closeConns func(), err error) {
	target, err := topo.Parse(plan.TargetTopology)
	if err != nil {
		return nil, nil, activityError(err)
	}
	src, srcURL, err := a.connect(ctx, source, plan.Database)
	if err != nil {
		return nil, nil, err
	}
	defer closeAll(src)
	s := &replicator.Stream{Workflow: plan.Key, Source: source, SourceConnString: srcURL,
		Slot: plan.Slot(source), Publication: plan.Publication(), SkipOriginPrefix: plan.OriginPrefix()}
	for _, t := range plan.Tables {
		table, err := replicator.DescribeTable(ctx, src, t.Schema, t.Name, t.ShardColumn)
		if err != nil {
			return nil, nil, activityError(fmt.Errorf("source %s: %w", source, err))
		}
		s.Tables = append(s.Tables, replicator.StreamTable{Table: table, Placement: target.Resolve(plan.Database, t.Schema, t.Name)})
	}
	closeConns = func() {
		for _, tg := range s.Targets {
			closeAll(tg.Conn)
		}
	}
	for _, shard := range plan.Targets {
		conn, _, err := a.connect(ctx, shard, plan.Database)
		if err != nil {
			closeConns()
			return nil, nil, err
		}
		s.Targets = append(s.Targets, replicator.Target{Shard: shard, Conn: conn})
	}
	return s, closeConns, nil
}

// StreamLag reads, on each source, how far the stream's slot is behind
// the source's WAL: the slot is confirmed only past what every target has
// durably applied, so this is the stream's lag as the sources see it.
func (a *Actions) StreamLag(ctx context.Context, plan workflows.ReshardPlan) (workflows.StreamLagResult, error) {
	a = a.forPlan(plan)
	var res workflows.StreamLagResult
	for _, src := range plan.Sources {
		conn, _, err := a.connect(ctx, src, plan.Database)
		if err != nil {
			return res, err
		}
		s := workflows.LagSample{Source: src}
		err = conn.QueryRow(ctx, `SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), confirmed_flush_lsn)::int8, confirmed_flush_lsn::text
			FROM pg_replication_slots WHERE slot_name = $1`, plan.Slot(src)).Scan(&s.LagBytes, &s.ConfirmedLSN)
		closeAll(conn)
		if err != nil {
			return res, activityError(fmt.Errorf("slot %s on %s: %w", plan.Slot(src), src, err))
		}
		res.Sources = append(res.Sources, s)
	}
	seconds := streamLagSeconds(ctx)
	for i := range res.Sources {
		if res.Sources[i].LagBytes > 0 {
			res.Sources[i].LagSeconds = seconds[res.Sources[i].Source]
		}
	}
	return res, nil
}
