package replicator

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// StreamTable is a table a stream carries and its placement in the target
// topology.
type StreamTable struct {
	Table     *Table
	Placement *topo.Placement
	// Into, when set, is the table the changes are applied to instead of
	// Table's namesake on the targets: OnlineDDL's shadow table (or, after
	// its swap, the old table) in the source's own database. Only the
	// columns Into has by name are written, each value cast explicitly to
	// Into's type for it (the shadow's definition is the changed one, so
	// a value cannot go over unchanged); Into must hold a unique index on
	// Table's order key. With Into, Placement may be nil when the stream
	// has exactly one target.
	Into *Table
}

// relation is a source relation as the stream decodes it: which of its
// columns are the table's copy columns, and their types.
type relation struct {
	st *StreamTable
	// col[j] is the relation column that holds table column j.
	col []int
	oid []uint32 // by table column
	// cast[j], with StreamTable.Into, is Into's type of table column j,
	// "" when Into has no such column (it is not written).
	cast []string
}

// value is one column of a decoded row: its bytes (owned) and how the
// stream sent it (pglogrepl.TupleDataType*).
type value struct {
	kind uint8
	data []byte
}

// change is one statement for one target, with its parameters.
type change struct {
	sql     string
	values  [][]byte
	oids    []uint32
	formats []int16

	table   *Table
	keyRefs []string // the parameters holding the row's order key
	// An insert's parts, to rebuild it as INSERT ... SELECT ... WHERE
	// when it must be guarded.
	insertHead, insertValues, insertTail string
}

// guard makes the statement do nothing when cond holds of its row's key.
func (c *change) guard(cond string) {
	if c.insertHead != "" {
		c.sql = c.insertHead + " SELECT " + c.insertValues + " WHERE NOT (" + cond + ") " + c.insertTail
		return
	}
	c.sql += " AND NOT (" + cond + ")"
}

// keyRow is the change's order key as a row of its parameters.
func (c *change) keyRow() string { return "ROW(" + strings.Join(c.keyRefs, ", ") + ")" }

func newRelation(m *pglogrepl.RelationMessage, tables map[string]*StreamTable) (*relation, error) {
	name := m.Namespace + "." + m.RelationName
	st := tables[name]
	if st == nil {
		return nil, pgerr.New(pgerr.ObjectNotInPrerequisiteState,
			"the publication sends changes of %s, which this stream does not carry", name)
	}
	rel := &relation{st: st, col: make([]int, len(st.Table.Columns)), oid: make([]uint32, len(st.Table.Columns))}
	if err := rel.mapInto(); err != nil {
		return nil, err
	}
	if len(m.Columns) != len(st.Table.Columns) {
		// A column added since the copy began would be dropped silently.
		return nil, pgerr.New(pgerr.ObjectNotInPrerequisiteState,
			"the change stream of %s has %d columns, the copy %d: the table changed since the copy began", name, len(m.Columns), len(st.Table.Columns))
	}
	for j, c := range st.Table.Columns {
		rel.col[j] = -1
		for i, rc := range m.Columns {
			if rc.Name == c.Name {
				rel.col[j], rel.oid[j] = i, rc.DataType
			}
		}
		if rel.col[j] < 0 {
			return nil, pgerr.New(pgerr.ObjectNotInPrerequisiteState,
				"the change stream of %s has no column %s: the table changed since the copy began", name, c.Name)
		}
	}
	return rel, nil
}

// row picks the table's columns out of a decoded tuple, copying their
// bytes: the tuple lives in a buffer the next message reuses.
func (rel *relation) row(t *pglogrepl.TupleData) ([]value, error) {
	out := make([]value, len(rel.col))
	for j, i := range rel.col {
		if i >= len(t.Columns) {
			return nil, pgerr.New(pgerr.ProtocolViolation, "a change of %s has %d columns, its relation %d", rel.st.Table.DisplayName(), len(t.Columns), len(rel.col))
		}
		c := t.Columns[i]
		out[j] = value{kind: c.DataType, data: bytes.Clone(c.Data)}
	}
	return out, nil
}

// target returns the index of the target a row belongs to, by its shard
// key, which must be present in the row.
func (rel *relation) target(s *Stream, row []value) (int, error) {
	t := rel.st.Table
	if rel.st.Placement == nil && rel.st.Into != nil && len(s.Targets) == 1 {
		return 0, nil
	}
	v := row[t.ShardKey]
	var format shardfunc.Format
	switch v.kind {
	case pglogrepl.TupleDataTypeBinary:
		format = shardfunc.BinaryFormat
	case pglogrepl.TupleDataTypeText:
		format = shardfunc.TextFormat
	default:
		return -1, pgerr.New(pgerr.ObjectNotInPrerequisiteState, "a change of %s carries no shard key value", t.DisplayName())
	}
	_, shard, err := rel.st.Placement.Route(t.ShardKeyType, format, v.data)
	if err != nil {
		return -1, err
	}
	i, ok := s.targetOf[shard]
	if !ok {
		return -1, pgerr.New(pgerr.ObjectNotInPrerequisiteState,
			"a change of %s routes to shard %q, which is not a target of this stream", t.DisplayName(), shard)
	}
	return i, nil
}

func (rel *relation) param(c *change, v value) string {
	switch v.kind {
	case pglogrepl.TupleDataTypeBinary:
		c.values = append(c.values, v.data)
		c.formats = append(c.formats, 1)
	case pglogrepl.TupleDataTypeText:
		c.values = append(c.values, v.data)
		c.formats = append(c.formats, 0)
	default: // NULL
		c.values = append(c.values, nil)
		c.formats = append(c.formats, 0)
	}
	return "$" + strconv.Itoa(len(c.values))
}

func (rel *relation) addParam(c *change, j int, v value) string {
	c.oids = append(c.oids, rel.oid[j])
	return rel.param(c, v)
}

// ref is how a statement refers to parameter p holding table column j:
// cast to Into's type when the stream applies into another table.
func (rel *relation) ref(j int, p string) string {
	if rel.cast == nil {
		return p
	}
	return "CAST(" + p + " AS " + rel.cast[j] + ")"
}

// written says whether table column j is written on the targets.
func (rel *relation) written(j int) bool { return rel.cast == nil || rel.cast[j] != "" }

// dest is the quoted name of the table changes are applied to.
func (rel *relation) dest() string {
	if rel.st.Into != nil {
		return rel.st.Into.QualifiedName()
	}
	return rel.st.Table.QualifiedName()
}

// mapInto finds, with StreamTable.Into, Into's type of each column; the
// order key must be among them.
func (rel *relation) mapInto() error {
	into := rel.st.Into
	if into == nil {
		return nil
	}
	t := rel.st.Table
	rel.cast = make([]string, len(t.Columns))
	for j, c := range t.Columns {
		for _, ic := range into.Columns {
			if ic.Name == c.Name {
				rel.cast[j] = ic.Type
			}
		}
	}
	for _, k := range t.OrderKey {
		if rel.cast[k] == "" {
			return pgerr.New(pgerr.ObjectNotInPrerequisiteState,
				"%s has no column %s of %s's key: changes cannot be applied to it", into.DisplayName(), t.Columns[k].Name, t.DisplayName())
		}
	}
	return nil
}

// upsert inserts a full row, or overwrites the row with its key: applying
// it twice leaves the same row.
func (rel *relation) upsert(row []value) (change, error) {
	t := rel.st.Table
	c := change{table: t}
	var names, values, sets []string
	keyRefs := make([]string, len(t.Columns))
	for j, col := range t.Columns {
		if !rel.written(j) {
			continue
		}
		if row[j].kind == pglogrepl.TupleDataTypeToast {
			return c, pgerr.New(pgerr.FeatureNotSupported,
				"a row of %s moves shard but its unchanged TOASTed column %s was not sent; use REPLICA IDENTITY FULL", t.DisplayName(), col.Name)
		}
		name := pgx.Identifier{col.Name}.Sanitize()
		names = append(names, name)
		p := rel.addParam(&c, j, row[j])
		keyRefs[j] = p
		values = append(values, rel.ref(j, p))
		if !isOrderKey(t, j) {
			sets = append(sets, name+" = EXCLUDED."+name)
		}
	}
	for _, k := range t.OrderKey {
		c.keyRefs = append(c.keyRefs, keyRefs[k])
	}
	c.insertHead = "INSERT INTO " + rel.dest() + " (" + strings.Join(names, ", ") + ")"
	c.insertValues = strings.Join(values, ", ")
	c.insertTail = "ON CONFLICT (" + t.orderKeyList() + ") DO "
	if len(sets) == 0 {
		c.insertTail += "NOTHING"
	} else {
		c.insertTail += "UPDATE SET " + strings.Join(sets, ", ")
	}
	c.sql = c.insertHead + " VALUES (" + c.insertValues + ") " + c.insertTail
	return c, nil
}

// update sets the columns the stream sent (not unchanged TOASTed ones) on
// the row with key old.
func (rel *relation) update(old, row []value) change {
	t := rel.st.Table
	c := change{table: t}
	var sets []string
	for j, col := range t.Columns {
		if row[j].kind == pglogrepl.TupleDataTypeToast || !rel.written(j) {
			continue
		}
		sets = append(sets, pgx.Identifier{col.Name}.Sanitize()+" = "+rel.ref(j, rel.addParam(&c, j, row[j])))
	}
	c.sql = "UPDATE " + rel.dest() + " SET " + strings.Join(sets, ", ") + " WHERE " + rel.keyMatch(&c, old)
	return c
}

func (rel *relation) delete(old []value) change {
	c := change{table: rel.st.Table}
	c.sql = "DELETE FROM " + rel.dest() + " WHERE " + rel.keyMatch(&c, old)
	return c
}

func (rel *relation) keyMatch(c *change, row []value) string {
	t := rel.st.Table
	conds := make([]string, len(t.OrderKey))
	for i, k := range t.OrderKey {
		ref := rel.addParam(c, k, row[k])
		c.keyRefs = append(c.keyRefs, ref)
		conds[i] = pgx.Identifier{t.Columns[k].Name}.Sanitize() + " = " + rel.ref(k, ref)
	}
	return strings.Join(conds, " AND ")
}

func isOrderKey(t *Table, j int) bool {
	for _, k := range t.OrderKey {
		if k == j {
			return true
		}
	}
	return false
}

func sameOrderKey(t *Table, a, b []value) bool {
	for _, k := range t.OrderKey {
		if a[k].kind != b[k].kind || !bytes.Equal(a[k].data, b[k].data) {
			return false
		}
	}
	return true
}

// OriginName is the replication origin of one (workflow, source, target)
// stream on the target: it records, in the same transaction as each
// applied source transaction, the source LSN applied up to.
func OriginName(workflow, source, target string) string {
	return "tessera_" + workflow + "_" + source + "_" + target
}

// setupOrigin creates the target's replication origin if needed, binds
// the session to it, and returns how far it has applied (0: nothing yet).
func setupOrigin(ctx context.Context, conn *pgx.Conn, name string) (pglogrepl.LSN, error) {
	if _, err := conn.Exec(ctx, `SELECT pg_replication_origin_create($1)
		WHERE NOT EXISTS (SELECT FROM pg_replication_origin WHERE roname = $1)`, name); err != nil {
		return 0, fmt.Errorf("create replication origin %s: %w", name, err)
	}
	if err := bindOrigin(ctx, conn, name); err != nil {
		return 0, fmt.Errorf("bind to replication origin %s: %w", name, err)
	}
	var lsn *string
	if err := conn.QueryRow(ctx, "SELECT pg_replication_origin_progress($1, true)::text", name).Scan(&lsn); err != nil {
		return 0, err
	}
	if lsn == nil {
		return 0, nil
	}
	return pglogrepl.ParseLSN(*lsn)
}

// originBusyWait bounds how long bindOrigin waits for the origin's last
// holder to let it go. A cancelled stream's backend may still be running
// the pipeline it was sent before it reads that its client left: 5 s
// was seen to fall short on a loaded machine under the race detector.
const originBusyWait = 30 * time.Second

// bindOrigin binds the session to the origin. A stream stopped by
// cancelling its context leaves its target connections closed, and their
// backends hold the origin until they notice and exit: a stream started
// right after (a VDiff's catch-up, a retried activity) finds it "already
// active" (55006) for a moment, so it waits for it, briefly. Two streams
// truly running at once for one origin still fail here.
func bindOrigin(ctx context.Context, conn *pgx.Conn, name string) error {
	deadline := time.Now().Add(originBusyWait)
	for {
		_, err := conn.Exec(ctx, "SELECT pg_replication_origin_session_setup($1)", name)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// releaseOrigin unbinds a session from its origin, so that the origin can
// be used again while the connection lives on. A connection that died has
// released it already.
func releaseOrigin(conn *pgx.Conn) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if conn.IsClosed() {
		return
	}
	if _, err := conn.Exec(ctx, "SELECT pg_replication_origin_session_reset()"); err != nil {
		// A connection a cancelled apply left unusable would hold the
		// origin for as long as it lives: closing it lets it go.
		slog.Debug("releasing a replication origin failed; closing the connection", "error", err)
		conn.Close(ctx)
	}
}

// pipelined bounds the statements applyTransaction sends in one round
// trip: a batch of a few rows costs one round trip, one of a thousand
// rows one too, and no pipeline grows without bound.
const pipelined = 1000

// applyTransaction applies a batch of consecutive source transactions'
// changes for one target (decoder.flush) in one target transaction, which
// also advances the target's origin to the batch's end: both commit, or
// neither. The statements go
// in pipelines of up to pipelined, BEGIN with the first and COMMIT with the
// last, so that a small source transaction costs a single round trip.
func applyTransaction(ctx context.Context, conn *pgx.Conn, changes []change, end pglogrepl.LSN, commitTime time.Time) error {
	pg := conn.PgConn()
	b := &pgconn.Batch{}
	b.ExecParams("BEGIN", nil, nil, nil, nil)
	// The slot is confirmed once this commit returns, so the commit must be
	// durable: synchronous_commit=off is raised to on for this transaction
	// (stricter settings, which the shard's durability policy may ask
	// for, are kept).
	b.ExecParams(`SELECT pg_replication_origin_xact_setup($1::pg_lsn, $2::timestamptz),
		CASE WHEN current_setting('synchronous_commit') = 'off' THEN set_config('synchronous_commit', 'on', true) END`,
		[][]byte{[]byte(end.String()), []byte(commitTime.UTC().Format("2006-01-02 15:04:05.999999Z07:00"))}, nil, nil, nil)
	sqls := []string{"BEGIN", "replication origin setup"}
	send := func() error {
		err := runPipeline(ctx, pg, b, sqls)
		if err != nil && !pg.IsClosed() {
			// A failed statement left the transaction aborted: nothing
			// of it commits.
			pg.Exec(context.Background(), "ROLLBACK").Close()
		}
		b, sqls = &pgconn.Batch{}, sqls[:0]
		return err
	}
	for _, c := range changes {
		b.ExecParams(c.sql, c.values, c.oids, c.formats, nil)
		sqls = append(sqls, c.sql)
		if len(sqls) >= pipelined {
			if err := send(); err != nil {
				return err
			}
		}
	}
	b.ExecParams("COMMIT", nil, nil, nil, nil)
	sqls = append(sqls, "COMMIT")
	return send()
}

// runPipeline sends a batch in one round trip and returns the first
// statement's error, naming it.
func runPipeline(ctx context.Context, pg *pgconn.PgConn, b *pgconn.Batch, sqls []string) error {
	mrr := pg.ExecBatch(ctx, b)
	var first error
	for i := 0; mrr.NextResult(); i++ {
		if _, err := mrr.ResultReader().Close(); err != nil && first == nil && i < len(sqls) {
			first = fmt.Errorf("%s: %w", firstWords(sqls[i]), err)
		}
	}
	if err := mrr.Close(); err != nil && first == nil {
		first = err
	}
	return first
}

func firstWords(sql string) string {
	if len(sql) > 60 {
		return sql[:60] + "..."
	}
	return sql
}
