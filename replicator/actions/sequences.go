package actions

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/workflows"
)

// tableSequences lists the sequences a table's columns take values from,
// with the column: those owned by a column (serial, identity) and those
// a column default calls.
const tableSequences = `
SELECT DISTINCT seq, col FROM (
	SELECT d.objid::regclass::text AS seq, a.attname::text AS col
	FROM pg_depend d
	JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
	JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
	WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass
	  AND d.refobjid = $1::regclass AND d.deptype IN ('a', 'i')
	UNION
	SELECT d.refobjid::regclass::text, a.attname::text
	FROM pg_attrdef ad
	JOIN pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum
	JOIN pg_depend d ON d.classid = 'pg_attrdef'::regclass AND d.objid = ad.oid AND d.refclassid = 'pg_class'::regclass
	JOIN pg_class s ON s.oid = d.refobjid AND s.relkind = 'S'
	WHERE ad.adrelid = $1::regclass
) q ORDER BY 1, 2`

// SetSequences sets, on every target, each sequence the plan's tables
// take values from past the highest value moved: the largest, over the
// sources, of the sequence's last value and the column's largest value.
// Without it the first insert on a target after the cutover could take a
// value the sources already handed out. A sequence is never set back.
func (a *Actions) SetSequences(ctx context.Context, in workflows.CutoverInput) (map[string]int64, error) {
	defer beating(ctx, noDetails)()
	a = a.forPlan(in.Plan)
	plan := in.Plan
	high := map[string]int64{} // sequence (as the first source names it) -> value
	for i, src := range plan.Sources {
		conn, _, err := a.connect(ctx, src, plan.Database)
		if err != nil {
			return nil, err
		}
		err = sourceHighs(ctx, conn, plan, high, i == 0)
		closeAll(conn)
		if err != nil {
			return nil, activityError(fmt.Errorf("source %s: %w", src, err))
		}
	}
	for _, shard := range plan.Targets {
		conn, _, err := a.connect(ctx, shard, plan.Database)
		if err != nil {
			return nil, err
		}
		err = func() error {
			defer closeAll(conn)
			for seq, v := range high {
				var exists bool
				if err := conn.QueryRow(ctx, "SELECT to_regclass($1) IS NOT NULL", seq).Scan(&exists); err != nil {
					return err
				}
				if !exists {
					continue // a target without the sequence has nothing to set
				}
				// seq is regclass output: quoted where it needs to be.
				if _, err := conn.Exec(ctx, `SELECT setval($1::regclass, greatest($2::int8, last_value)) FROM `+seq, seq, v); err != nil {
					return err
				}
			}
			return nil
		}()
		if err != nil {
			return nil, activityError(fmt.Errorf("target %s: %w", shard, err))
		}
	}
	return high, nil
}

// sourceHighs raises high[seq] to the source's value for each sequence of
// the plan's tables; only the first source adds sequences (all sources
// have the same schema).
func sourceHighs(ctx context.Context, conn *pgx.Conn, plan workflows.ReshardPlan, high map[string]int64, add bool) error {
	for _, t := range plan.Tables {
		rows, err := conn.Query(ctx, tableSequences, pgx.Identifier{t.Schema, t.Name}.Sanitize())
		if err != nil {
			return err
		}
		pairs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([2]string, error) {
			var p [2]string
			err := r.Scan(&p[0], &p[1])
			return p, err
		})
		if err != nil {
			return err
		}
		for _, p := range pairs {
			seq, col := p[0], p[1]
			if _, known := high[seq]; !known && !add {
				continue
			}
			var v int64
			if err := conn.QueryRow(ctx, `SELECT greatest((SELECT last_value FROM `+seq+`),
				(SELECT coalesce(max(`+pgx.Identifier{col}.Sanitize()+`)::int8, 0) FROM `+pgx.Identifier{t.Schema, t.Name}.Sanitize()+`))`).Scan(&v); err != nil {
				return fmt.Errorf("sequence %s of %s: %w", seq, t.DisplayName(), err)
			}
			high[seq] = max(high[seq], v)
		}
	}
	return nil
}
