package router

import (
	"bufio"
	"context"
	"encoding/binary"
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/router/planner"
)

// INSERT ... SELECT that the shards cannot run themselves (into a sharded
// table from rows of other shards, or into an unsharded table from a
// sharded one; planner/insertselect.go pushes down the colocated case) is
// run by the router: it runs the SELECT as a statement of its own, as a client's (routed,
// merged or gathered), reads its rows, and makes the statement again as
// INSERT ... VALUES of those rows, each value a literal of the SELECT
// column's type (NULL::type for NULL), the column list, ON CONFLICT and
// RETURNING kept. That INSERT then goes where any does: its sequence
// defaults filled in (sequence_insert.go), split by shard key, committed
// atomically across the shards. Typed literals give the INSERT the
// assignment casts INSERT ... SELECT applies (a numeric into an integer
// column rounds, a text too long for varchar(3) fails with 22001).
//
// What differs from one Postgres: the SELECT and the INSERT are two
// statements, so outside a transaction block a row committed between
// them by another session is not seen, as if the INSERT had started
// before it; the rows pass through the router's memory, up to
// tessera.gather_limit (54000 beyond it: COPY is the bulk path). Values
// pass through their text forms: a session with extra_float_digits below
// 1 is refused (its floats would lose digits).
//
// Alone in a Query, the rewritten statement is planned again
// (simple.go's rewriteQuery); in a string of several it is expanded in
// its turn (insertSelectInString), after the statements before it ran.
// The extended protocol runs it as such a Query (insertselect_ext.go).

// expandInsertSelect rewrites st, a refused INSERT ... SELECT, as INSERT
// ... VALUES of the SELECT's
// rows; it answers the client itself when the SELECT fails or gives no
// rows. A zero action leaves the planner's refusal to answer.
func (c *clientConn) expandInsertSelect(ctx context.Context, st *plannedStmt) (sequenceAction, error) {
	tree, ins, sel := c.insertSelectParts(st)
	if tree == nil {
		return sequenceAction{}, nil
	}
	t := st.Tables[0]
	if ins.WithClause != nil {
		sel.WithClause, ins.WithClause = ins.WithClause, nil
	}
	if n, lossy := c.settings.lossyFloatText(); lossy {
		return sequenceAction{}, pgerr.New(pgerr.FeatureNotSupported,
			"INSERT ... SELECT into %s.%s with extra_float_digits %d is not supported: the router passes the rows as text", t.Schema, t.Table, n)
	}
	selectSQL, err := pg_query.Deparse(&pg_query.ParseResult{Version: tree.Version,
		Stmts: []*pg_query.RawStmt{{Stmt: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}}}})
	if err != nil {
		return sequenceAction{}, pgerr.New(pgerr.InternalError, "writing the SELECT of INSERT ... SELECT: %v", err)
	}
	res, err := c.captureSelect(ctx, selectSQL)
	if err != nil {
		return sequenceAction{}, err
	}
	if res.failed {
		// The SELECT's own error (or notices) is the INSERT's answer.
		c.out = append(c.out, res.answer...)
		return sequenceAction{answered: true, failed: true}, nil
	}
	c.out = append(c.out, res.notices...)
	if res.over {
		c.failTx()
		return sequenceAction{}, pgerr.New("54000",
			"INSERT ... SELECT into %s.%s reads more than tessera.gather_limit (%d bytes) of rows through the router: raise it, or COPY the rows", t.Schema, t.Table, c.settings.gatherLimitBytes())
	}
	types, err := c.typeNames(ctx, res.oids)
	if err != nil {
		return sequenceAction{}, err
	}
	if len(res.rows) == 0 {
		// No row: one SELECT of typed NULLs that makes none, so that
		// RETURNING still describes its columns.
		var targets []*pg_query.Node
		for _, typ := range types {
			targets = append(targets, &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{Val: typedLiteral(nil, typ)}}})
		}
		*sel = pg_query.SelectStmt{TargetList: targets, Op: pg_query.SetOperation_SETOP_NONE,
			WhereClause: &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{Val: &pg_query.A_Const_Boolval{Boolval: &pg_query.Boolean{Boolval: false}}}}}}
		return c.runOnTargetShard(ctx, tree)
	}
	values := make([]*pg_query.Node, len(res.rows))
	for i, row := range res.rows {
		items := make([]*pg_query.Node, len(row))
		for j, v := range row {
			items[j] = typedLiteral(v, types[j])
		}
		values[i] = &pg_query.Node{Node: &pg_query.Node_List{List: &pg_query.List{Items: items}}}
	}
	*sel = pg_query.SelectStmt{ValuesLists: values, Op: pg_query.SetOperation_SETOP_NONE}
	sql, err := pg_query.Deparse(tree)
	if err != nil {
		return sequenceAction{}, pgerr.New(pgerr.InternalError, "writing INSERT ... SELECT as VALUES: %v", err)
	}
	return sequenceAction{sql: sql}, nil
}

// insertSelectParts returns the parse of st, its INSERT and its SELECT,
// when st is an INSERT ... SELECT the planner refused that the router
// runs itself; nil when the refusal stands: another database's table, a
// SELECT that is VALUES, a data-modifying WITH, a failed transaction
// (25P02 answers) or a replica session (which may not write).
func (c *clientConn) insertSelectParts(st *plannedStmt) (*pg_query.ParseResult, *pg_query.InsertStmt, *pg_query.SelectStmt) {
	if st == nil || st.Kind != planner.Insert || pgerr.Code(st.Err) != pgerr.FeatureNotSupported || len(st.Tables) == 0 ||
		c.tx.failed || c.settings.replica() || st.Tables[0].Database != c.database {
		return nil, nil, nil
	}
	tree, err := pg_query.Parse(st.SQL)
	if err != nil || len(tree.Stmts) != 1 {
		return nil, nil, nil
	}
	ins := tree.Stmts[0].Stmt.GetInsertStmt()
	sel := ins.GetSelectStmt().GetSelectStmt()
	if ins == nil || sel == nil || len(sel.ValuesLists) > 0 {
		return nil, nil, nil
	}
	if ins.WithClause != nil && (sel.WithClause != nil || modifyingCTE(ins.WithClause)) {
		return nil, nil, nil
	}
	return tree, ins, sel
}

// takesInsertSelect reports whether the router runs st, an INSERT ...
// SELECT the planner refused, itself (expandInsertSelect).
func (c *clientConn) takesInsertSelect(st *plannedStmt) bool {
	tree, _, _ := c.insertSelectParts(st)
	return tree != nil
}

// modifyingCTE reports a WITH clause holding a data-modifying statement.
func modifyingCTE(w *pg_query.WithClause) bool {
	for _, n := range w.Ctes {
		if n.GetCommonTableExpr().GetCtequery().GetSelectStmt() == nil {
			return true
		}
	}
	return false
}

// typedLiteral is v (nil for NULL) as a constant of type typ, a type
// name node.
func typedLiteral(v []byte, typ *pg_query.TypeName) *pg_query.Node {
	arg := &pg_query.A_Const{Isnull: true}
	if v != nil {
		arg = &pg_query.A_Const{Val: &pg_query.A_Const_Sval{Sval: &pg_query.String{Sval: string(v)}}}
	}
	return &pg_query.Node{Node: &pg_query.Node_TypeCast{TypeCast: &pg_query.TypeCast{
		Arg: &pg_query.Node{Node: &pg_query.Node_AConst{AConst: arg}}, TypeName: typ}}}
}

// typeNames returns the type name node of each type OID, as
// format_type writes it on the authoritative shard.
func (c *clientConn) typeNames(ctx context.Context, oids []uint32) ([]*pg_query.TypeName, error) {
	if len(oids) == 0 {
		return nil, nil
	}
	list := make([]string, len(oids))
	for i, oid := range oids {
		list[i] = strconv.FormatUint(uint64(oid), 10)
	}
	rows, err := c.srv.adminQuery(ctx, c.database, "SELECT pg_catalog.format_type(t, NULL) FROM unnest('{"+strings.Join(list, ",")+"}'::pg_catalog.oid[]) WITH ORDINALITY AS u(t, i) ORDER BY i")
	if err != nil {
		return nil, err
	}
	if len(rows) != len(oids) {
		return nil, pgerr.New(pgerr.InternalError, "format_type answered %d rows for %d types", len(rows), len(oids))
	}
	out := make([]*pg_query.TypeName, len(oids))
	for i, r := range rows {
		tree, err := pg_query.Parse("SELECT NULL::" + r[0])
		if err != nil {
			return nil, pgerr.New(pgerr.InternalError, "type %s: %v", r[0], err)
		}
		out[i] = tree.Stmts[0].Stmt.GetSelectStmt().TargetList[0].GetResTarget().GetVal().GetTypeCast().GetTypeName()
	}
	return out, nil
}

// runOnTargetShard runs tree (an INSERT ... SELECT that inserts no row)
// on the authoritative shard, which has the table too (DDL runs on every
// shard), for its answer: RowDescription for RETURNING, and INSERT 0 0.
func (c *clientConn) runOnTargetShard(ctx context.Context, tree *pg_query.ParseResult) (sequenceAction, error) {
	sql, err := pg_query.Deparse(tree)
	if err != nil {
		return sequenceAction{}, pgerr.New(pgerr.InternalError, "writing INSERT ... SELECT of no row: %v", err)
	}
	r := c.authoritativeRoute()
	failed, err := c.execute(ctx, &r, queryMessage(sql), nil, true)
	if err != nil {
		return sequenceAction{}, err
	}
	return sequenceAction{answered: true, failed: failed}, nil
}

// capturedSelect is the answer of a SELECT the router ran for itself.
type capturedSelect struct {
	oids     []uint32   // the columns' types
	rows     [][][]byte // text values; nil for NULL
	rowCount int64      // DataRows, kept or not
	failed   bool       // it failed: answer holds its error
	answer   []byte     // its error and notices, for the client
	notices  []byte
	over     bool // more than the session's gather_limit bytes
}

// captureSelect runs sql (one SELECT) as the client's statement would
// run, with its answer kept from the client.
func (c *clientConn) captureSelect(ctx context.Context, sql string) (*capturedSelect, error) {
	stmts, _, err := c.plan(sql, nil)
	if err != nil {
		return nil, err
	}
	if len(stmts) != 1 || stmts[0].Kind != planner.Select {
		return nil, pgerr.New(pgerr.FeatureNotSupported, "INSERT ... SELECT whose SELECT is not a plain read is not supported yet")
	}
	return c.captureStatement(ctx, stmts[0], c.settings.gatherLimitBytes())
}

// captureStatement runs st as the client's statement would run, keeping
// its answer from the client: its rows up to limit bytes (none with
// limit 0: they are only counted), its other messages.
func (c *clientConn) captureStatement(ctx context.Context, st *plannedStmt, limit int64) (*capturedSelect, error) {
	r := c.route(st, nil)
	if r.err != nil {
		return nil, r.err
	}
	sink := &captureSink{limit: limit}
	c.wmu.Lock()
	saved, savedOut := c.w, c.out
	c.w, c.out = bufio.NewWriter(sink), nil
	c.wmu.Unlock()
	failed, runErr := c.execute(ctx, &r, queryMessage(st.SQL), nil, r.scan)
	c.wmu.Lock()
	c.w.Flush()
	sink.Write(c.out)
	c.w, c.out = saved, savedOut
	c.wmu.Unlock()
	if runErr != nil {
		return nil, runErr
	}
	res := &capturedSelect{failed: failed, over: sink.over, rowCount: sink.rows}
	err := backendMessages(sink.kept, func(typ byte, msg []byte) error {
		switch typ {
		case 'T':
			res.oids = pgwire.RowDescriptionTypes(msg)
		case 'D':
			row := pgwire.DataRowValues(msg)
			if row == nil {
				return pgerr.New(pgerr.ProtocolViolation, "a malformed DataRow from a shard")
			}
			res.rows = append(res.rows, row)
		case 'E':
			res.failed = true
			res.answer = append(res.answer, msg...)
		case 'N', 'A', 'S':
			res.notices = append(res.notices, msg...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if res.failed {
		res.answer = append(res.notices, res.answer...)
	}
	return res, nil
}

// captureSink keeps what a captured statement writes: its DataRows up to
// limit bytes (then it notes that it ran over, and counts the rest), its
// other messages whole. Writes may cut messages anywhere: partial holds
// the start of one.
type captureSink struct {
	kept    []byte
	partial []byte
	limit   int64
	rows    int64
	over    bool
}

func (s *captureSink) Write(p []byte) (int, error) {
	s.partial = append(s.partial, p...)
	b := s.partial
	for len(b) >= 5 {
		n := 1 + int(binary.BigEndian.Uint32(b[1:5]))
		if n < 5 || len(b) < n {
			break
		}
		msg := b[:n]
		b = b[n:]
		if msg[0] == 'D' {
			s.rows++
			if s.over || int64(len(s.kept)+n) > s.limit {
				s.over = s.limit > 0 || s.over
				continue
			}
		}
		s.kept = append(s.kept, msg...)
	}
	s.partial = append(s.partial[:0], b...)
	return len(p), nil
}
