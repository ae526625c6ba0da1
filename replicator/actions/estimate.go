package actions

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/workflows"
)

// checkCopyBatchRows refuses a copy_batch_rows outside 1..MaxCopyBatchRows;
// 0 keeps the worker's default.
func checkCopyBatchRows(n int) error {
	if n < 0 || n > workflows.MaxCopyBatchRows {
		return refuse(pgerr.InvalidParameterValue, "copy_batch_rows %d: want 1 to %d rows (0 or absent: the default)", n, workflows.MaxCopyBatchRows)
	}
	return nil
}

// copyBatchRows is the plan's batch size, else the worker's.
func (a *Actions) copyBatchRows(plan workflows.ReshardPlan) int {
	if plan.CopyBatchRows > 0 {
		return plan.CopyBatchRows
	}
	return a.CopyBatchRows
}

// estimateRows fills the plan's RowsEstimated: per source and table, the
// planner's row count (pg_class.reltuples, kept by ANALYZE and autovacuum,
// so free to read), or where the table was never analysed (reltuples -1)
// a count, which reads the table once.
func (a *Actions) estimateRows(ctx context.Context, plan *workflows.ReshardPlan) error {
	plan.RowsEstimated = map[string]map[string]int64{}
	for _, src := range plan.Sources {
		conn, _, err := a.connect(ctx, src, plan.Database)
		if err != nil {
			return err
		}
		rows, err := tableEstimates(ctx, conn, plan.Tables)
		closeAll(conn)
		if err != nil {
			return activityError(fmt.Errorf("estimating the rows on source %s: %w", src, err))
		}
		plan.RowsEstimated[src] = rows
	}
	return nil
}

// tableEstimates estimates each table's rows on one server.
func tableEstimates(ctx context.Context, conn *pgx.Conn, tables []workflows.ReshardTable) (map[string]int64, error) {
	out := make(map[string]int64, len(tables))
	for _, t := range tables {
		name := pgx.Identifier{t.Schema, t.Name}.Sanitize()
		var n float64
		if err := conn.QueryRow(ctx, "SELECT reltuples FROM pg_class WHERE oid = $1::regclass", name).Scan(&n); err != nil {
			return nil, err
		}
		if n < 0 {
			var c int64
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM "+name).Scan(&c); err != nil {
				return nil, err
			}
			n = float64(c)
		}
		out[t.DisplayName()] = int64(n)
	}
	return out, nil
}
