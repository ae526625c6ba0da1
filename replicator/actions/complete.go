package actions

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/workflows"
)

// PrepareReverse makes, on each target, what the reverse streams read
// from: a publication of the plan's tables and, after it (pgoutput reads
// publications as of each change), a logical slot. It runs before the
// topology switch, so the slot holds every write the targets take after
// it. The forward streams' applied changes, which reach the slot too,
// carry their replication origin, and the reverse streams skip them.
// It returns the targets' terms, read before the slots are made: the
// reverse streams fail with workflows.SourceFailoverError once a target
// fails over, its slot lost.
func (a *Actions) PrepareReverse(ctx context.Context, in workflows.CutoverInput) (map[string]int64, error) {
	defer beating(ctx, noDetails)()
	a = a.forPlan(in.Plan)
	rev := in.Plan.Reversed()
	terms, err := a.shardTerms(ctx, rev.Sources)
	if err != nil {
		return nil, err
	}
	for _, shard := range rev.Sources {
		conn, _, err := a.connect(ctx, shard, rev.Database)
		if err != nil {
			return nil, err
		}
		err = ensurePublication(ctx, conn, rev)
		if err == nil {
			_, err = conn.Exec(ctx, `SELECT pg_create_logical_replication_slot($1, 'pgoutput')
				WHERE NOT EXISTS (SELECT FROM pg_replication_slots WHERE slot_name = $1)`, rev.Slot(shard))
		}
		closeAll(conn)
		if err != nil {
			return nil, activityError(fmt.Errorf("target %s: %w", shard, err))
		}
	}
	return terms, nil
}

// CompleteReshard ends a switched reshard, on every instance: the
// reverse and forward slots, publications, replication origins and copy
// progress rows (CleanupReshard of both directions), and on each source
// the fence and the moved rows. The workflow has stopped the reverse
// streams. Every row of the group's tables on a source has moved (a
// target is never a source), so the tables are emptied, in one TRUNCATE
// with the fence's drop: references among the group's tables do not
// block it, and no write can land between the two. A MoveTables' plan
// drops the moved tables from the sources instead (not DROP ... CASCADE:
// a foreign key from a table that stays refuses the drop, and Complete
// fails saying so); an import's leaves the external tables, unfenced.
func (a *Actions) CompleteReshard(ctx context.Context, plan workflows.ReshardPlan) error {
	a = a.forPlan(plan)
	if err := a.CleanupReshard(ctx, plan.Reversed()); err != nil {
		return err
	}
	if err := a.CleanupReshard(ctx, plan); err != nil {
		return err
	}
	tables := make([]string, len(plan.Tables))
	for i, t := range plan.Tables {
		tables[i] = pgx.Identifier{t.Schema, t.Name}.Sanitize()
	}
	for _, src := range plan.Sources {
		conn, _, err := a.connect(ctx, src, plan.Database)
		if err != nil {
			return err
		}
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			if err := unfence(ctx, tx, plan); err != nil {
				return err
			}
			if plan.Imports() {
				// The external tables stay: Tessera does not own that
				// database.
				return nil
			}
			if plan.MovesTables() {
				// The tables have moved to another group: they go.
				_, err := tx.Exec(ctx, "DROP TABLE "+strings.Join(tables, ", "))
				return err
			}
			_, err := tx.Exec(ctx, "TRUNCATE "+strings.Join(tables, ", "))
			return err
		})
		closeAll(conn)
		if err != nil {
			return activityError(fmt.Errorf("source %s: %w", src, err))
		}
	}
	return nil
}
