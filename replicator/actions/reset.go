package actions

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/workflows"
)

// ResetMovement undoes, before a cutover, everything a movement did, so
// that it can start again from new snapshots after a source failed over:
// it reads the sources' terms (before anything else: a later promotion
// is then seen again), drops the streams' slots on every live instance of
// each source (the old primary, now a replica, may still hold one, and
// would keep its WAL for ever), drops the targets' replication origins
// and copy progress rows, and empties the plan's tables on the targets.
// Every row of those tables on a target came from the movement, as
// Complete's TRUNCATE of the sources relies on the other way round: a
// target is never a source, and no router sends it the tables' writes
// before the cutover. A source's rows come from one snapshot per source,
// so an emptied target holds no row the new copy does not write again.
// The publications stay (they are catalogue rows, on the promoted
// replica too; the new copy finds them).
func (a *Actions) ResetMovement(ctx context.Context, plan workflows.ReshardPlan) (workflows.ResetMovementResult, error) {
	a = a.forPlan(plan)
	stop := beating(ctx, func() any { return nil })
	defer stop()
	var res workflows.ResetMovementResult
	terms, err := a.shardTerms(ctx, plan.Sources)
	if err != nil {
		return res, err
	}
	res.Terms = terms
	for _, src := range plan.Sources {
		conn, _, err := a.connect(ctx, src, plan.Database)
		if err != nil {
			return res, err
		}
		err = replicator.DropSlot(ctx, conn, plan.Slot(src))
		closeAll(conn)
		if err != nil {
			return res, activityError(fmt.Errorf("source %s: %w", src, err))
		}
		res.Unreached = append(res.Unreached, a.dropSlotEverywhere(ctx, plan, src)...)
	}
	tables := make([]string, len(plan.Tables))
	for i, t := range plan.Tables {
		tables[i] = pgx.Identifier{t.Schema, t.Name}.Sanitize()
	}
	for _, shard := range plan.Targets {
		conn, _, err := a.connect(ctx, shard, plan.Database)
		if err != nil {
			return res, err
		}
		err = dropTargetState(ctx, conn, plan)
		if err == nil {
			_, err = conn.Exec(ctx, "TRUNCATE "+strings.Join(tables, ", "))
		}
		closeAll(conn)
		if err != nil {
			return res, activityError(fmt.Errorf("target %s: %w", shard, err))
		}
	}
	return res, nil
}

// dropSlotEverywhere drops the stream's slot of source on each of its
// live instances the connector can reach (DiscoveryConnector can),
// returning, as "instance: why", those where that failed.
func (a *Actions) dropSlotEverywhere(ctx context.Context, plan workflows.ReshardPlan, source string) (unreached []string) {
	ic, ok := a.Conn.(InstanceConnector)
	if !ok {
		return nil
	}
	urls, err := ic.InstanceConnStrings(ctx, source, plan.Database)
	if err != nil {
		return []string{source + ": " + err.Error()}
	}
	for id, url := range urls {
		conn, err := pgx.Connect(ctx, url)
		if err == nil {
			err = replicator.DropSlot(ctx, conn, plan.Slot(source))
			closeAll(conn)
		}
		if err != nil {
			unreached = append(unreached, fmt.Sprintf("%s of %s: %v", id, source, err))
		}
	}
	return unreached
}
