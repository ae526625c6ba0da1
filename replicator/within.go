package replicator

import (
	"context"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// A copy within one database (OnlineDDL's shadow table: rows of a table
// rewritten into another of a new definition) cannot forward binary COPY
// rows, whose bytes are the old types'; its caller copies with INSERT ...
// SELECT under the exported snapshot and records each batch here, in the
// format CopyTable uses, so that the change stream that follows guards
// each change by the stretch its row was copied in (see progressDDL).

// CopyPosition returns the last key a copy recorded for a table (nil:
// none yet) and whether the copy is done, for a target of a workflow's
// copy from one source.
func CopyPosition(ctx context.Context, conn *pgx.Conn, workflow, source string, t *Table) (key []string, done bool, err error) {
	p, err := readPosition(ctx, conn, workflow, source, t.DisplayName())
	return p.key, p.done, err
}

// RecordCopyBatch records, in tx (the batch's own transaction), a batch of
// rows copied from the snapshot at lsn: the stretch after after (nil: the
// table's start) up to last, or to the end when done.
func RecordCopyBatch(ctx context.Context, tx pgx.Tx, workflow, source string, lsn pglogrepl.LSN, t *Table, after, last []string, rows int64, done bool) error {
	return recordProgress(ctx, tx, workflow, source, lsn, batchRecord{table: t.DisplayName(), after: after, last: last, rows: rows, done: done})
}

// KeyLiteral is a key's text form as a row literal of t's order-key
// types, to compare with ROW(key columns).
func KeyLiteral(t *Table, key []string) string { return keyLiteral(t, key) }

// OrderKeyList is t's quoted order-key columns, in key order.
func (t *Table) OrderKeyList() string { return t.orderKeyList() }
