package actions

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/workflows"
)

// CleanupReshard drops what a reshard created, wherever it is still
// there: on each source the stream's slot and the publication, on each
// target the replication origins and the reshard's copy progress rows.
// Rows already copied to the targets stay (see docs/operations.md).
func (a *Actions) CleanupReshard(ctx context.Context, plan workflows.ReshardPlan) error {
	a = a.forPlan(plan)
	stop := beating(ctx, func() any { return nil })
	defer stop()
	for _, src := range plan.Sources {
		conn, _, err := a.connect(ctx, src, plan.Database)
		if err != nil {
			return err
		}
		err = replicator.DropSlot(ctx, conn, plan.Slot(src))
		// A failed-over source's old primary may hold the slot too.
		a.dropSlotEverywhere(ctx, plan, src)
		if err == nil {
			_, err = conn.Exec(ctx, "DROP PUBLICATION IF EXISTS "+pgx.Identifier{plan.Publication()}.Sanitize())
		}
		closeAll(conn)
		if err != nil {
			return activityError(fmt.Errorf("source %s: %w", src, err))
		}
	}
	for _, shard := range plan.Targets {
		conn, _, err := a.connect(ctx, shard, plan.Database)
		if err != nil {
			return err
		}
		err = dropTargetState(ctx, conn, plan)
		closeAll(conn)
		if err != nil {
			return activityError(fmt.Errorf("target %s: %w", shard, err))
		}
	}
	return nil
}

func dropTargetState(ctx context.Context, conn *pgx.Conn, plan workflows.ReshardPlan) error {
	for _, src := range plan.Sources {
		for _, shard := range plan.Targets {
			name := replicator.OriginName(plan.Key, src, shard)
			if _, err := conn.Exec(ctx, `SELECT pg_replication_origin_drop(roname) FROM pg_replication_origin WHERE roname = $1`, name); err != nil {
				return err
			}
		}
	}
	_, err := conn.Exec(ctx, `DO $$ BEGIN
		IF to_regclass('_tessera.copy_progress') IS NOT NULL THEN
			DELETE FROM _tessera.copy_progress WHERE workflow = `+pgwire.QuoteLiteral(plan.Key)+`;
		END IF; END $$`)
	return err
}
