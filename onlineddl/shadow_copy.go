package onlineddl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/workflows"
)

// defaultShadowBatch is ShadowInput.BatchRows's default.
const defaultShadowBatch = 10000

// afterShadowBatch, when set (by tests), runs after each batch of a copy
// commits; its error stops the copy there, as a killed worker would.
var afterShadowBatch func(batch int) error

// CopyShadow fills the shadow table from a consistent snapshot of the
// table. It first publishes the table and creates the forward stream's
// slot, whose exported snapshot the copy reads: the stream then starts
// exactly where the snapshot ends. The rows go over in batches ordered by
// the table's key; the replicator's binary COPY rows cannot cross a type
// change, so each value is cast to its new type on the server (a binary
// COPY out of a SELECT of the casts, into a binary COPY of the shadow).
// Each batch commits with its progress in
// _tessera.copy_progress (the replicator's record), so a copy stopped
// part-way resumes after the last key it wrote, from a new snapshot (a
// temporary slot's), and the stream applies to each row only the changes
// newer than the snapshot it was copied from.
func (a *Activities) CopyShadow(ctx context.Context, in workflows.ShadowInput) (workflows.ShadowResult, error) {
	conn, n, rec, err := a.shadowStep(ctx, in)
	if err != nil {
		return workflows.ShadowResult{}, activityError(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	switch {
	case rec == nil:
		return workflows.ShadowResult{}, refuse(pgerr.ObjectNotInPrerequisiteState, "shard %s: the migration has no shadow table (PrepareShadow first)", in.Shard)
	case rec.state == workflows.ShadowCancelled:
		return workflows.ShadowResult{}, refuse(pgerr.ObjectNotInPrerequisiteState, "shard %s: the migration was cancelled", in.Shard)
	case rec.state != workflows.ShadowPrepared:
		return workflows.ShadowResult{State: rec.state, AlreadyDone: true}, nil
	}
	url, err := a.Conn.ConnString(ctx, in.Shard, in.Database)
	if err != nil {
		return workflows.ShadowResult{}, activityError(err)
	}
	var rows atomic.Int64
	stop := beatEvery(ctx, 5*time.Second, func() any { return rows.Load() })
	defer stop()
	err = copyShadow(ctx, conn, url, n, in.BatchRows, &rows)
	if err != nil {
		return workflows.ShadowResult{Rows: rows.Load()}, activityError(fmt.Errorf("shard %s: copying %s into %s: %w", in.Shard, n.table, n.shadow, err))
	}
	// Fresh statistics before the shadow takes the table's queries.
	if _, err := conn.Exec(ctx, "ANALYZE "+n.qual(n.shadow)); err != nil {
		return workflows.ShadowResult{Rows: rows.Load()}, activityError(err)
	}
	if _, err := conn.Exec(ctx, `UPDATE _tessera.shadow_migrations SET state = $2, updated_at = now() WHERE id = $1`,
		in.MigrationID, workflows.ShadowCopied); err != nil {
		return workflows.ShadowResult{Rows: rows.Load()}, activityError(err)
	}
	return workflows.ShadowResult{State: workflows.ShadowCopied, Rows: rows.Load()}, nil
}

func copyShadow(ctx context.Context, conn *pgx.Conn, url string, n shadowNames, batch int, rows *atomic.Int64) error {
	if batch <= 0 {
		batch = defaultShadowBatch
	}
	t, err := replicator.DescribeTable(ctx, conn, n.schema, n.table, "")
	if err != nil {
		return err
	}
	into, err := describeColumns(ctx, conn, n.schema, n.shadow)
	if err != nil {
		return err
	}
	if err := replicator.EnsureProgressTable(ctx, conn); err != nil {
		return err
	}
	// The publication must exist before the slot: decoding reads it as of
	// each change.
	if err := ensurePublication(ctx, conn, n.publication(true), n.qual(n.table)); err != nil {
		return err
	}
	exists, err := replicator.SlotExists(ctx, conn, n.slot(true))
	if err != nil {
		return err
	}
	var after []string
	var snap *replicator.Snapshot
	if exists {
		key, done, err := replicator.CopyPosition(ctx, conn, n.tag, direction(true), t)
		if err != nil || done {
			return err
		}
		after = key
		snap, err = replicator.OpenSnapshot(ctx, url, n.slot(true)+"_c", true)
		if err != nil {
			return err
		}
	} else if snap, err = replicator.OpenSnapshot(ctx, url, n.slot(true), false); err != nil {
		return err
	}
	defer snap.Close(context.WithoutCancel(ctx))

	// The snapshot stays imported in one read-only transaction on a
	// connection of its own; the writes commit in another, with their
	// progress row (an upsert a transaction reading an older snapshot
	// could not make).
	read, err := pgx.Connect(ctx, url)
	if err != nil {
		return err
	}
	defer read.Close(context.WithoutCancel(ctx))
	rtx, err := replicator.BeginSnapshotRead(ctx, read, snap)
	if err != nil {
		return err
	}
	defer rtx.Rollback(context.WithoutCancel(ctx))

	cols := make([]string, 0, len(t.Columns))
	values := make([]string, 0, len(t.Columns))
	for _, c := range t.Columns {
		typ, ok := into[c.Name]
		if !ok {
			continue // the statement dropped it
		}
		name := pgx.Identifier{c.Name}.Sanitize()
		cols = append(cols, name)
		values = append(values, "CAST("+name+" AS "+typ+")")
	}
	keyText := make([]string, len(t.OrderKey))
	for i, k := range t.OrderKey {
		keyText[i] = pgx.Identifier{t.Columns[k].Name}.Sanitize() + "::text"
	}
	last := after
	for i := 1; ; i++ {
		var conds []string
		if last != nil {
			conds = append(conds, "ROW("+t.OrderKeyList()+") > "+replicator.KeyLiteral(t, last))
		}
		// The batch's last key bounds it: the copy reads by key ranges,
		// so that the rows are cast on the server and go over in
		// binary COPY of the shadow's own types.
		var upper []string
		err := rtx.QueryRow(ctx, fmt.Sprintf("SELECT ARRAY[%s] FROM ONLY %s %s ORDER BY %s OFFSET %d LIMIT 1",
			strings.Join(keyText, ", "), n.qual(n.table), where(conds), t.OrderKeyList(), batch-1)).Scan(&upper)
		if err != nil && !errors.Is(err, pgx.ErrNoRows) {
			return err
		}
		done := upper == nil
		if !done {
			conds = append(conds, "ROW("+t.OrderKeyList()+") <= "+replicator.KeyLiteral(t, upper))
		}
		out := fmt.Sprintf("COPY (SELECT %s FROM ONLY %s %s ORDER BY %s) TO STDOUT (FORMAT binary)",
			strings.Join(values, ", "), n.qual(n.table), where(conds), t.OrderKeyList())
		in := fmt.Sprintf("COPY %s (%s) FROM STDIN (FORMAT binary)", n.qual(n.shadow), strings.Join(cols, ", "))
		var count int64
		err = pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
			pr, pw := io.Pipe()
			readErr := make(chan error, 1)
			go func() {
				_, err := read.PgConn().CopyTo(ctx, pw, out)
				pw.CloseWithError(err)
				readErr <- err
			}()
			tag, err := tx.Conn().PgConn().CopyFrom(ctx, pr, in)
			pr.CloseWithError(err)
			if rerr := <-readErr; rerr != nil {
				return rerr
			}
			if err != nil {
				return err
			}
			count = tag.RowsAffected()
			last := upper
			if done {
				last = nil
			}
			return replicator.RecordCopyBatch(ctx, tx, n.tag, direction(true), snap.LSN, t, after, last, count, done)
		})
		if err != nil {
			return err
		}
		rows.Add(count)
		if done {
			return nil
		}
		if afterShadowBatch != nil {
			if err := afterShadowBatch(i); err != nil {
				return err
			}
		}
		last = upper
	}
}

func where(conds []string) string {
	if len(conds) == 0 {
		return ""
	}
	return "WHERE " + strings.Join(conds, " AND ")
}

// describeColumns maps each column of a table to its type.
func describeColumns(ctx context.Context, conn *pgx.Conn, schema, name string) (map[string]string, error) {
	rows, err := conn.Query(ctx, `SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute
		WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped AND attgenerated = ''`,
		pgx.Identifier{schema, name}.Sanitize())
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	var c, typ string
	_, err = pgx.ForEachRow(rows, []any{&c, &typ}, func() error { out[c] = typ; return nil })
	if err == nil && len(out) == 0 {
		err = pgerr.New("42P01", "relation %s.%s does not exist", schema, name)
	}
	return out, err
}

// intoTable is a table as StreamTable.Into wants it.
func intoTable(ctx context.Context, conn *pgx.Conn, schema, name string) (*replicator.Table, error) {
	cols, err := describeColumns(ctx, conn, schema, name)
	if err != nil {
		return nil, err
	}
	t := &replicator.Table{Schema: schema, Name: name, ShardKey: -1}
	for c, typ := range cols {
		t.Columns = append(t.Columns, replicator.Column{Name: c, Type: typ})
	}
	return t, nil
}

// ensurePublication publishes one table under name, once.
func ensurePublication(ctx context.Context, conn *pgx.Conn, name, table string) error {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM pg_publication WHERE pubname = $1)", name).Scan(&exists); err != nil || exists {
		return err
	}
	_, err := conn.Exec(ctx, "CREATE PUBLICATION "+pgx.Identifier{name}.Sanitize()+" FOR TABLE "+table)
	var pgErr interface{ SQLState() string }
	if errors.As(err, &pgErr) && pgErr.SQLState() == "42710" {
		return nil // another attempt made it meanwhile
	}
	return err
}
