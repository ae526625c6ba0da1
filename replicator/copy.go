package replicator

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/topo"
)

// DefaultBatchRows is how many rows a batch copies when Copier.BatchRows
// is zero: large enough that the per-batch transaction and progress row
// cost little, small enough that a resumed copy repeats little.
const DefaultBatchRows = 10000

// Target is one shard a copy writes to, by a connection to its primary's
// database.
type Target struct {
	Shard string
	Conn  *pgx.Conn
}

// Copier copies tables from one source snapshot to the target shards of a
// workflow.
type Copier struct {
	Workflow string // the workflow's id: progress rows are its own
	Source   string // the source shard's uid
	// Snapshot is the one Read imports; its LSN is recorded with every
	// batch, for the change stream.
	Snapshot *Snapshot
	Read     pgx.Tx // BeginSnapshotRead's transaction on the source
	Targets  []Target
	// BatchRows bounds a batch; zero means DefaultBatchRows.
	BatchRows int

	// atTarget, when set (by tests), runs before each target commits a
	// batch it has written (committed false) and after it commits it
	// (true): it lets a test stop a copy at any point of a batch.
	atTarget func(batch, target int, committed bool)
}

// CopyStats counts what one CopyTable call copied.
type CopyStats struct {
	Batches int   // batches begun, the one it stopped in included
	Rows    int64 // rows read from the source
	// RereadBatches are the batches read again because an earlier attempt,
	// stopped between two targets' commits, had written them to some
	// targets and not to others.
	RereadBatches int
	TargetRows    []int64 // rows written to each target
}

// CopyTable copies table t, placed by p in the target topology, resuming
// where the targets' progress rows say. Each batch reads the next rows in
// order key order as binary COPY from the snapshot, routes them (only the
// shard key is decoded) and streams each target's share, as it is read,
// into a binary COPY in a transaction per target, which commits with the
// batch's progress row once the batch is read. Every target records
// every batch's last key, even when it received none of its rows, so the
// targets pass the same key boundaries; a copy stopped between two targets'
// commits leaves them one batch apart, and the resumed copy sends that
// batch only to the targets that lack it.
func (c *Copier) CopyTable(ctx context.Context, t *Table, p *topo.Placement) (CopyStats, error) {
	stats := CopyStats{TargetRows: make([]int64, len(c.Targets))}
	shards := make([]string, len(c.Targets))
	for i, tg := range c.Targets {
		shards[i] = tg.Shard
	}
	router, err := NewCopyRouter(p, t.ShardKey, t.ShardKeyType, shards)
	if err != nil {
		return stats, err
	}
	router.Capture(t.OrderKey...)
	batchRows := c.BatchRows
	if batchRows <= 0 {
		batchRows = DefaultBatchRows
	}

	pos := make([]targetPosition, len(c.Targets))
	allDone := true
	for i, tg := range c.Targets {
		if pos[i], err = readPosition(ctx, tg.Conn, c.Workflow, c.Source, t.DisplayName()); err != nil {
			return stats, fmt.Errorf("copy progress of %s on %s: %w", t.DisplayName(), tg.Shard, err)
		}
		allDone = allDone && pos[i].done
	}
	if allDone {
		return stats, nil
	}
	// The distinct positions in key order: the copy starts at the lowest,
	// and each higher one is where a target that is ahead rejoins.
	stops, err := c.sortedPositions(ctx, t, pos)
	if err != nil {
		return stats, err
	}
	segStart := make([][]string, len(pos))
	for i := range pos {
		segStart[i] = pos[i].key
	}

	types := pgtype.NewMap()
	cur, next := stops[0], 1
	for {
		var upper []string
		if next < len(stops) {
			upper = stops[next]
		}
		// A target takes part in the batch when it has copied no further
		// than cur; the others already hold these rows.
		var part []int
		for i := range c.Targets {
			if !pos[i].done && sameKey(pos[i].key, cur) {
				part = append(part, i)
			}
		}
		reread := len(part) < len(c.Targets)
		writes, err := c.beginWrites(ctx, t, part)
		if err != nil {
			return stats, err
		}
		err = c.readBatch(ctx, t, router, cur, upper, batchRows, writes.dst)
		stats.Batches++
		if err := writes.finish(err); err != nil {
			return stats, err
		}
		stats.Rows += router.Rows()
		if reread {
			stats.RereadBatches++
		}

		// last is the key the batch copied up to: its last row's, or the
		// bound that ended it. A done table's last stretch reaches its end.
		last := cur
		if router.Rows() > 0 {
			if last, err = keyText(types, t, router.LastFields()); err != nil {
				writes.rollback()
				return stats, err
			}
		}
		// A batch that ends on the bound has exhausted its stretch too:
		// the next would read nothing.
		exhausted := router.Rows() < int64(batchRows) || (upper != nil && sameKey(last, upper))
		if exhausted && upper != nil {
			last = upper
		}
		done := exhausted && upper == nil
		for _, i := range part {
			if c.atTarget != nil {
				c.atTarget(stats.Batches, i, false)
			}
			rec := batchRecord{table: t.DisplayName(), after: segStart[i], last: last, done: done, rows: router.TargetRows(i), reread: reread}
			if err := writes.commit(ctx, i, rec); err != nil {
				writes.rollback()
				return stats, fmt.Errorf("copy %s to %s: %w", t.DisplayName(), c.Targets[i].Shard, err)
			}
			stats.TargetRows[i] += router.TargetRows(i)
			pos[i] = targetPosition{key: last, done: done}
			if c.atTarget != nil {
				c.atTarget(stats.Batches, i, true)
			}
		}
		if done {
			return stats, nil
		}
		cur = last
		if exhausted {
			next++
		}
	}
}

// readBatch copies the rows after key cur (nil: from the start), up to and
// including upper (nil: no bound), at most limit of them in key order, from
// the snapshot through the router to dst.
func (c *Copier) readBatch(ctx context.Context, t *Table, router *CopyRouter, cur, upper []string, limit int, dst []io.Writer) error {
	keys := "ROW(" + t.orderKeyList() + ")"
	var where []string
	if cur != nil {
		where = append(where, keys+" > "+keyLiteral(t, cur))
	}
	if upper != nil {
		where = append(where, keys+" <= "+keyLiteral(t, upper))
	}
	q := "SELECT " + t.columnList() + " FROM " + t.QualifiedName()
	if len(where) > 0 {
		q += " WHERE " + strings.Join(where, " AND ")
	}
	q += " ORDER BY " + t.orderKeyList() + " LIMIT " + strconv.Itoa(limit)
	sql := "COPY (" + q + ") TO STDOUT (FORMAT binary)"

	pr, pw := io.Pipe()
	routed := make(chan error, 1)
	go func() {
		err := router.Route(pr, dst)
		// Unblock the COPY if routing stopped early.
		pr.CloseWithError(fmt.Errorf("routing stopped: %w", err))
		routed <- err
	}()
	// CopyTo writes each row on its own: buffered, the router receives
	// them in chunks rather than one hand-over between goroutines a row.
	buf := bufio.NewWriterSize(pw, outBufferSize)
	_, copyErr := c.Read.Conn().PgConn().CopyTo(ctx, buf, sql)
	if copyErr == nil {
		copyErr = buf.Flush()
	}
	pw.CloseWithError(copyErr)
	routeErr := <-routed
	if routeErr != nil {
		return fmt.Errorf("copy %s: %w", t.DisplayName(), routeErr)
	}
	if copyErr != nil {
		return fmt.Errorf("read %s from the source: %w", t.DisplayName(), copyErr)
	}
	return nil
}

// batchWrites are the targets' transactions of one batch, each receiving
// its share of the rows as the source sends them: a COPY ... FROM STDIN
// fed through a pipe while the batch is read, so reading, routing and
// writing overlap as in a plain COPY pipe. Each commits with its progress
// row once the batch is read.
type batchWrites struct {
	c      *Copier
	txs    []pgx.Tx // by target; nil for targets not in the batch
	pipes  []*io.PipeWriter
	dst    []io.Writer // what the router writes to
	copied []chan error
}

// beginWrites opens, on each target of part, the batch's transaction and
// its COPY of t.
func (c *Copier) beginWrites(ctx context.Context, t *Table, part []int) (*batchWrites, error) {
	n := len(c.Targets)
	w := &batchWrites{c: c, txs: make([]pgx.Tx, n), pipes: make([]*io.PipeWriter, n), dst: make([]io.Writer, n), copied: make([]chan error, n)}
	sql := "COPY " + t.QualifiedName() + " (" + t.columnList() + ") FROM STDIN (FORMAT binary)"
	for _, i := range part {
		tg := c.Targets[i]
		tx, err := tg.Conn.Begin(ctx)
		if err != nil {
			// The COPYs begun end, then their transactions roll back.
			w.finish(err)
			return nil, fmt.Errorf("copy %s to %s: %w", t.DisplayName(), tg.Shard, err)
		}
		w.txs[i] = tx
		pr, pw := io.Pipe()
		w.pipes[i], w.dst[i] = pw, pw
		w.copied[i] = make(chan error, 1)
		go func() {
			_, err := tg.Conn.PgConn().CopyFrom(ctx, pr, sql)
			// Unblock the router if the target refused the rows.
			pr.CloseWithError(fmt.Errorf("copy to %s stopped: %w", tg.Shard, err))
			w.copied[i] <- err
		}()
	}
	return w, nil
}

// finish ends the targets' COPYs once the batch is read (readErr nil) or
// failed, and returns the first error of either; on one, every target's
// transaction is rolled back.
func (w *batchWrites) finish(readErr error) error {
	w.abort(readErr)
	err := readErr
	for i, ch := range w.copied {
		if ch == nil {
			continue
		}
		if cerr := <-ch; cerr != nil && err == nil {
			err = fmt.Errorf("copy to %s: %w", w.c.Targets[i].Shard, cerr)
		}
	}
	if err != nil {
		w.rollback()
	}
	return err
}

// abort closes the pipes: with nil, a target's COPY ends normally; with
// an error, it fails (the client sends CopyFail).
func (w *batchWrites) abort(err error) {
	for _, pw := range w.pipes {
		if pw != nil {
			pw.CloseWithError(err)
		}
	}
}

// commit records target i's progress in its transaction and commits it.
func (w *batchWrites) commit(ctx context.Context, i int, rec batchRecord) error {
	tx := w.txs[i]
	c := w.c
	if err := recordProgress(ctx, tx, c.Workflow, c.Source, c.Snapshot.LSN, rec); err != nil {
		return err
	}
	w.txs[i] = nil
	return tx.Commit(ctx)
}

// rollback ends the transactions not committed.
func (w *batchWrites) rollback() {
	for i, tx := range w.txs {
		if tx != nil {
			tx.Rollback(context.Background())
			w.txs[i] = nil
		}
	}
}

// sortedPositions returns the distinct positions of the targets that are
// not done, lowest first, comparing keys on the source in the order key's
// own ordering. nil, the table's start, sorts first.
func (c *Copier) sortedPositions(ctx context.Context, t *Table, pos []targetPosition) ([][]string, error) {
	var out [][]string
	for _, p := range pos {
		if p.done {
			continue
		}
		at := len(out)
		for j, q := range out {
			if sameKey(p.key, q) {
				at = -1
				break
			}
			less, err := c.keyLess(ctx, t, p.key, q)
			if err != nil {
				return nil, err
			}
			if less {
				at = j
				break
			}
		}
		if at >= 0 {
			out = append(out[:at], append([][]string{p.key}, out[at:]...)...)
		}
	}
	return out, nil
}

func (c *Copier) keyLess(ctx context.Context, t *Table, a, b []string) (bool, error) {
	if a == nil || b == nil {
		return a == nil && b != nil, nil
	}
	var less bool
	err := c.Read.QueryRow(ctx, "SELECT "+keyLiteral(t, a)+" < "+keyLiteral(t, b)).Scan(&less)
	return less, err
}

func sameKey(a, b []string) bool {
	if (a == nil) != (b == nil) || len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// keyLiteral writes an order-key value as a row of typed literals. COPY
// takes no parameters, so the key goes into the statement; every value is
// quoted and cast to its column's type.
func keyLiteral(t *Table, key []string) string {
	var b strings.Builder
	b.WriteString("ROW(")
	for i, k := range t.OrderKey {
		if i > 0 {
			b.WriteString(", ")
		}
		b.WriteString(pgwire.QuoteLiteral(key[i]))
		b.WriteString("::")
		b.WriteString(t.Columns[k].Type)
	}
	b.WriteString(")")
	return b.String()
}

// keyText turns the binary order-key fields of a batch's last row into
// text, the form progress rows keep and keyLiteral quotes. Text input and
// output of the key types are exact (integers, text, uuid, numeric,
// timestamps to the microsecond), so the next batch starts right after it.
func keyText(m *pgtype.Map, t *Table, fields [][]byte) ([]string, error) {
	out := make([]string, len(fields))
	for i, raw := range fields {
		col := t.Columns[t.OrderKey[i]]
		if raw == nil {
			return nil, pgerr.New(pgerr.InternalError, "order key column %s is NULL in a copied row", col.Name)
		}
		typ, ok := m.TypeForOID(col.TypeOID)
		if !ok {
			return nil, pgerr.New(pgerr.FeatureNotSupported,
				"table %s: order key column %s is of type %s, which the copy cannot resume by", t.DisplayName(), col.Name, col.Type)
		}
		v, err := typ.Codec.DecodeValue(m, col.TypeOID, pgtype.BinaryFormatCode, raw)
		if err != nil {
			return nil, fmt.Errorf("decode order key column %s: %w", col.Name, err)
		}
		text, err := m.Encode(col.TypeOID, pgtype.TextFormatCode, v, nil)
		if err != nil {
			return nil, fmt.Errorf("encode order key column %s: %w", col.Name, err)
		}
		out[i] = string(text)
	}
	return out, nil
}
