package replicator

import (
	"context"
	"errors"
	"strconv"
	"strings"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
)

// diffSettings fix, in every diff transaction, the settings that text
// output depends on: a row's text, hashed on each side, must come out the
// same from servers configured differently.
const diffSettings = `SELECT set_config('TimeZone', 'UTC', true), set_config('DateStyle', 'ISO, YMD', true),
	set_config('IntervalStyle', 'postgres', true), set_config('extra_float_digits', '1', true),
	set_config('bytea_output', 'hex', true)`

// BeginDiffRead starts on conn the read-only REPEATABLE READ transaction a
// diff reads one shard in. With snap, it reads as of that exported
// snapshot (a source); without, its snapshot is taken now (a target,
// once its appliers hold at the consistent point).
func BeginDiffRead(ctx context.Context, conn *pgx.Conn, snap *Snapshot) (pgx.Tx, error) {
	var tx pgx.Tx
	var err error
	if snap != nil {
		tx, err = BeginSnapshotRead(ctx, conn, snap)
	} else {
		tx, err = conn.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	}
	if err != nil {
		return nil, err
	}
	// After SET TRANSACTION SNAPSHOT, which must come first; on a target
	// this first query takes the snapshot.
	if _, err := tx.Exec(ctx, diffSettings); err != nil {
		tx.Rollback(context.Background())
		return nil, err
	}
	return tx, nil
}

// OpenDiffSnapshot takes a source's side of a diff's consistent point: a
// temporary replication slot (named slot, gone with its connection)
// exports a snapshot, which a read transaction on conn imports. The
// snapshot holds exactly the transactions that committed before lsn: a
// Stream run with StopAt lsn brings the targets to the same point.
//
// The sequence for a consistent diff while the source takes writes:
// stop the table's streams; OpenDiffSnapshot on each source; run each
// source's stream with StopAt its lsn until it returns; BeginDiffRead on
// each target; then restart the streams and run the Differ on these
// transactions. A stream stopped before the snapshot was exported has
// applied nothing at or after lsn, so StopAt reaches it exactly.
func OpenDiffSnapshot(ctx context.Context, sourceConnString, slot string, conn *pgx.Conn) (pgx.Tx, pglogrepl.LSN, error) {
	snap, err := OpenSnapshot(ctx, sourceConnString, slot, true)
	if err != nil {
		return nil, 0, err
	}
	// Once imported, the snapshot lives in the read transaction.
	defer snap.Close(context.Background())
	tx, err := BeginDiffRead(ctx, conn, snap)
	if err != nil {
		return nil, 0, err
	}
	return tx, snap.LSN, nil
}

// keyRange is the WHERE condition of the keys after lo up to hi.
func (d *Differ) keyRange(lo, hi []string) string {
	t := d.Table
	keys := "ROW(" + t.orderKeyList() + ")"
	conds := []string{"true"}
	if lo != nil {
		conds = append(conds, keys+" > "+keyLiteral(t, lo))
	}
	if hi != nil {
		conds = append(conds, keys+" <= "+keyLiteral(t, hi))
	}
	return strings.Join(conds, " AND ")
}

// rowText is a row's text: a record's output, in which NULL is an empty
// field and an empty string is "", so the two hash apart; quotes and
// backslashes are escaped, so no two rows share a text. Generated
// columns are left out, as the copy leaves them.
func (d *Differ) rowText() string {
	return "ROW(" + d.Table.columnList() + ")::text"
}

// rowHashQuery returns, for each source row of a chunk, its shard key and
// the two halves of the md5 of its text as int8s.
func (d *Differ) rowHashQuery(lo, hi []string) string {
	t := d.Table
	return "SELECT sk, ('x' || substr(h, 1, 16))::bit(64)::int8, ('x' || substr(h, 17, 16))::bit(64)::int8 FROM (SELECT " +
		pgx.Identifier{t.Columns[t.ShardKey].Name}.Sanitize() + "::text AS sk, md5(" + d.rowText() + ") AS h FROM " +
		t.QualifiedName() + " WHERE " + d.keyRange(lo, hi) + ") s"
}

// chunkSumQuery returns a target's count of a chunk's rows and the sums of
// the halves of their md5s, as exact numerics in text.
func (d *Differ) chunkSumQuery(lo, hi []string) string {
	return "SELECT count(*), coalesce(sum(('x' || substr(h, 1, 16))::bit(64)::int8), 0)::text, " +
		"coalesce(sum(('x' || substr(h, 17, 16))::bit(64)::int8), 0)::text FROM (SELECT md5(" + d.rowText() +
		") AS h FROM " + d.Table.QualifiedName() + " WHERE " + d.keyRange(lo, hi) + ") s"
}

// keyArray is the order key as a text array.
func (d *Differ) keyArray() string {
	t := d.Table
	parts := make([]string, len(t.OrderKey))
	for i, k := range t.OrderKey {
		parts[i] = pgx.Identifier{t.Columns[k].Name}.Sanitize() + "::text"
	}
	return "ARRAY[" + strings.Join(parts, ", ") + "]"
}

// rowsQuery returns a chunk's rows: order key, shard key and each
// column's md5 ('null' for NULL, which no md5 is), in key order.
func (d *Differ) rowsQuery(lo, hi []string) string {
	t := d.Table
	cols := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		cols[i] = "coalesce(md5(" + pgx.Identifier{c.Name}.Sanitize() + "::text), 'null')"
	}
	return "SELECT " + d.keyArray() + ", " + pgx.Identifier{t.Columns[t.ShardKey].Name}.Sanitize() + "::text, ARRAY[" +
		strings.Join(cols, ", ") + "] FROM " + t.QualifiedName() + " WHERE " + d.keyRange(lo, hi) +
		" ORDER BY " + t.orderKeyList()
}

// chunkEnd returns the upper bound of the chunk after lo: the lowest,
// over every side, of the key n rows on, so that no side has more than n
// rows in the chunk; nil when every side has fewer left (the last chunk
// then reaches the table's end, and a target's extra rows beyond the
// source's last key fall in it).
func (d *Differ) chunkEnd(ctx context.Context, lo []string, n int) ([]string, error) {
	t := d.Table
	q := "SELECT " + d.keyArray() + " FROM " + t.QualifiedName() + " WHERE " + d.keyRange(lo, nil) +
		" ORDER BY " + t.orderKeyList() + " OFFSET " + strconv.Itoa(n-1) + " LIMIT 1"
	var end []string
	for _, side := range append(append([]DiffSide(nil), d.Sources...), d.Targets...) {
		var key []string
		err := side.Read.QueryRow(ctx, q).Scan(&key)
		if errors.Is(err, pgx.ErrNoRows) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if end == nil {
			end = key
			continue
		}
		var less bool
		// Compared by the first source, in the order key's own ordering.
		if err := d.Sources[0].Read.QueryRow(ctx, "SELECT "+keyLiteral(t, key)+" < "+keyLiteral(t, end)).Scan(&less); err != nil {
			return nil, err
		}
		if less {
			end = key
		}
	}
	return end, nil
}
