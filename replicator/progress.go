package replicator

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// progressDDL creates the table in which each target records, in the same
// transaction as each batch it receives, how far the copy of a table has
// come. A row is one stretch of a table copied from one snapshot: after
// after_key (NULL: from the table's start) up to last_key, or to the
// table's end once done: rows beyond the last key copied did not exist in
// that snapshot. A copy resumed
// from a new snapshot starts a new row, so the change stream can tell, for
// any key, the snapshot its copied row belongs to and apply only changes
// newer than it.
//
// The counters are exact because they commit with the batches they count:
// batches and rows this target received in the stretch, and reread_batches,
// those of them the copy read from the source a second time because an
// earlier attempt, stopped between two targets' commits, had already
// written them to another target. Summed over a target's stretches, rows
// equals the rows the copy put there, and reread_batches is what a resumed
// copy repeated beyond the one batch in flight when it stopped (which no
// target committed, so nothing counts it).
const progressDDL = `
CREATE SCHEMA IF NOT EXISTS _tessera;
CREATE TABLE IF NOT EXISTS _tessera.copy_progress (
	workflow     text NOT NULL,
	source       text NOT NULL,
	table_name   text NOT NULL,
	snapshot_lsn pg_lsn NOT NULL,
	after_key    text[],
	last_key     text[],
	done         boolean NOT NULL DEFAULT false,
	updated_at   timestamptz NOT NULL DEFAULT now(),
	PRIMARY KEY (workflow, source, table_name, snapshot_lsn)
);
ALTER TABLE _tessera.copy_progress
	ADD COLUMN IF NOT EXISTS batches int8 NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS rows int8 NOT NULL DEFAULT 0,
	ADD COLUMN IF NOT EXISTS reread_batches int8 NOT NULL DEFAULT 0`

// EnsureProgressTable creates _tessera.copy_progress on a target if it is
// not there yet.
func EnsureProgressTable(ctx context.Context, conn *pgx.Conn) error {
	// Two copies starting at once may race on CREATE ... IF NOT EXISTS;
	// an advisory lock serialises them.
	tx, err := conn.Begin(ctx)
	if err != nil {
		return err
	}
	defer tx.Rollback(context.Background())
	if _, err := tx.Exec(ctx, "SELECT pg_advisory_xact_lock(hashtext('_tessera.copy_progress'))"); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, progressDDL); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// targetPosition is how far one target has copied one table.
type targetPosition struct {
	key  []string // last key copied, in text form; nil: nothing yet
	done bool
}

// readPosition returns a target's latest progress on a table.
func readPosition(ctx context.Context, conn *pgx.Conn, workflow, source, table string) (targetPosition, error) {
	var p targetPosition
	var after []string
	err := conn.QueryRow(ctx, `SELECT after_key, last_key, done FROM _tessera.copy_progress
		WHERE workflow = $1 AND source = $2 AND table_name = $3
		ORDER BY snapshot_lsn DESC LIMIT 1`, workflow, source, table).Scan(&after, &p.key, &p.done)
	if errors.Is(err, pgx.ErrNoRows) {
		return targetPosition{}, nil
	}
	if p.key == nil {
		p.key = after
	}
	return p, err
}

// batchRecord is what a target records with one batch it commits.
type batchRecord struct {
	table       string
	after, last []string // the stretch's start, the batch's last key
	done        bool
	rows        int64 // rows the batch wrote to this target
	reread      bool  // an earlier attempt already wrote it to another target
}

// recordProgress upserts a target's progress in tx, the batch's own
// transaction, counting the batch.
func recordProgress(ctx context.Context, tx pgx.Tx, workflow, source string, lsn pglogrepl.LSN, b batchRecord) error {
	reread := 0
	if b.reread {
		reread = 1
	}
	_, err := tx.Exec(ctx, `INSERT INTO _tessera.copy_progress AS p
			(workflow, source, table_name, snapshot_lsn, after_key, last_key, done, batches, rows, reread_batches)
		VALUES ($1, $2, $3, $4::pg_lsn, $5, $6, $7, 1, $8, $9)
		ON CONFLICT (workflow, source, table_name, snapshot_lsn)
		DO UPDATE SET last_key = excluded.last_key, done = excluded.done, updated_at = now(),
			batches = p.batches + 1, rows = p.rows + excluded.rows,
			reread_batches = p.reread_batches + excluded.reread_batches`,
		workflow, source, b.table, lsn.String(), b.after, b.last, b.done, b.rows, reread)
	return err
}

// CopyCounters are a target's copy counters for one table, summed over the
// stretches (one per attempt) that _tessera.copy_progress records.
type CopyCounters struct {
	Stretches     int   // attempts that wrote at least one batch
	Batches       int64 // batches committed
	Rows          int64 // rows committed
	RereadBatches int64 // batches read again for this target (see progressDDL)
	Done          bool
}

// ReadCopyCounters returns a target's counters for a table of a workflow's
// copy from one source (zero when it has none).
func ReadCopyCounters(ctx context.Context, conn *pgx.Conn, workflow, source, table string) (CopyCounters, error) {
	var c CopyCounters
	err := conn.QueryRow(ctx, `SELECT count(*), coalesce(sum(batches), 0), coalesce(sum(rows), 0),
			coalesce(sum(reread_batches), 0), coalesce(bool_or(done), false)
		FROM _tessera.copy_progress WHERE workflow = $1 AND source = $2 AND table_name = $3`,
		workflow, source, table).Scan(&c.Stretches, &c.Batches, &c.Rows, &c.RereadBatches, &c.Done)
	return c, err
}

// segment is one stretch of a table a target copied from one snapshot.
type segment struct {
	table       string
	lsn         pglogrepl.LSN
	after, last []string
	done        bool
}

// readSegments returns a target's copy stretches for a workflow and source
// (none when no copy ever wrote progress there).
func readSegments(ctx context.Context, conn *pgx.Conn, workflow, source string) ([]segment, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('_tessera.copy_progress') IS NOT NULL").Scan(&exists); err != nil || !exists {
		return nil, err
	}
	rows, err := conn.Query(ctx, `SELECT table_name, snapshot_lsn::text, after_key, last_key, done
		FROM _tessera.copy_progress WHERE workflow = $1 AND source = $2`, workflow, source)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []segment
	for rows.Next() {
		var sg segment
		var lsn string
		if err := rows.Scan(&sg.table, &lsn, &sg.after, &sg.last, &sg.done); err != nil {
			return nil, err
		}
		if sg.lsn, err = pglogrepl.ParseLSN(lsn); err != nil {
			return nil, err
		}
		out = append(out, sg)
	}
	return out, rows.Err()
}

// holds returns the condition, on a change's order key, that the row is in
// this stretch; "true" when the stretch is the whole table.
func (sg segment) holds(t *Table, c *change) string {
	var conds []string
	if sg.after != nil {
		conds = append(conds, c.keyRow()+" > "+keyLiteral(t, sg.after))
	}
	if !sg.done && sg.last != nil {
		conds = append(conds, c.keyRow()+" <= "+keyLiteral(t, sg.last))
	}
	if len(conds) == 0 {
		return "true"
	}
	return "(" + strings.Join(conds, " AND ") + ")"
}
