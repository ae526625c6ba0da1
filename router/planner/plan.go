package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
	"google.golang.org/protobuf/proto"
)

// planCtx holds what planning one input (one cache miss) needs.
type planCtx struct {
	top     *topo.Topology
	schema  Schema
	in      *Input
	sql     string
	lits    []span
	semis   []int
	consts  []int32           // A_Const locations of every statement
	start   int               // offset of the statement being planned in sql
	raw     *pg_query.RawStmt // the statement being planned
	version int32             // pg_query's parse tree version, for deparsing

	// exact: a plan depends on more of the text than its shape (a SET
	// value, a split the scanner cannot follow), so the plans are cached
	// by the exact text only.
	exact bool
	// noCache: a plan holds a Schema error, which a later CREATE TABLE
	// may cure without anyone calling Invalidate.
	noCache bool
	// afterDDL: an earlier statement of the input is DDL, which the
	// catalog snapshot cannot have seen (checkCalls).
	afterDDL bool
	// views is the database's views snapshot, taken at the first
	// unlisted relation (views.go).
	views *Views
}

// parse is the cache-miss path: it parses the input with pg_query and
// plans each statement. It reports whether the plans may be shared by every
// input of the same shape (shape) and whether they may be cached at all.
func parse(top *topo.Topology, schema Schema, in *Input, sc *scan) (stmts []*Statement, shape, cacheable bool, err error) {
	res, err := pg_query.Parse(in.SQL)
	if err != nil {
		return nil, false, false, syntaxError(err)
	}
	c := &planCtx{top: top, schema: schema, in: in, sql: in.SQL, lits: sc.lits, semis: sc.semis, exact: sc.odd, version: res.Version}
	if len(res.Stmts) == 0 {
		return []*Statement{{Kind: Empty, Route: Router, semiFrom: -1, semiTo: -1}}, !c.exact, true, nil
	}
	for _, raw := range res.Stmts {
		start := int(raw.StmtLocation)
		end := len(in.SQL)
		if raw.StmtLen > 0 {
			end = start + int(raw.StmtLen)
		}
		st := &Statement{semiFrom: c.semicolon(start-1, start > 0), semiTo: c.semicolon(end, raw.StmtLen > 0)}
		start, end = trimSpace(in.SQL, start, end)
		st.SQL, c.start = in.SQL[start:end], start
		f := collect(raw.Stmt)
		c.raw = raw
		c.statement(st, raw.Stmt, f)
		c.bindKeys(st, start)
		if st.Kind == DDL || st.Kind == Utility {
			c.afterDDL = true
		}
		if len(res.Stmts) == 1 && !sc.odd {
			c.autoPrepare(st, f, start)
		}
		stmts = append(stmts, st)
	}
	if !literalsMatch(in.SQL, c.lits, c.consts) {
		c.exact = true
	}
	return stmts, !c.exact, !c.noCache, nil
}

// semicolon returns the index of the ';' token at byte offset off, or -1
// when there is none to look for (want is false: the start or end of the
// input). If pg_query split where the scanner saw no semicolon, the input is
// cached by exact text.
func (c *planCtx) semicolon(off int, want bool) int {
	if !want {
		return -1
	}
	for i, s := range c.semis {
		if s == off {
			return i
		}
	}
	c.exact = true
	return -1
}

// statement plans one parsed statement into st; f is what a walk over
// its whole tree found.
func (c *planCtx) statement(st *Statement, n *pg_query.Node, f *facts) {
	c.consts = append(c.consts, f.consts...)
	st.SessionState |= f.session
	c.dispatch(st, n, f)
}

// dispatch plans n by its type. Statements that wrap another (EXPLAIN,
// COPY (query), PREPARE, DECLARE) dispatch their inner statement with the
// facts of the whole.
func (c *planCtx) dispatch(st *Statement, n *pg_query.Node, f *facts) {
	switch x := n.GetNode().(type) {
	case *pg_query.Node_SelectStmt:
		c.planSelect(st, x.SelectStmt, f)
	case *pg_query.Node_InsertStmt:
		st.Kind = Insert
		ins := x.InsertStmt
		q := &query{kind: Insert, target: ins.Relation, insert: ins}
		if oc := ins.OnConflictClause; oc != nil {
			q.sets = oc.TargetList
		}
		c.planQuery(st, q, f)
	case *pg_query.Node_UpdateStmt:
		st.Kind = Update
		up := x.UpdateStmt
		c.planQuery(st, &query{kind: Update, target: up.Relation, sets: up.TargetList, update: up}, f)
	case *pg_query.Node_DeleteStmt:
		st.Kind = Delete
		del := x.DeleteStmt
		c.planQuery(st, &query{kind: Delete, target: del.Relation, delete: del}, f)
	case *pg_query.Node_MergeStmt:
		st.Kind = Merge
		c.planQuery(st, &query{kind: Merge, target: x.MergeStmt.Relation}, f)
	case *pg_query.Node_CopyStmt:
		c.planCopy(st, x.CopyStmt, f)
	case *pg_query.Node_ExplainStmt:
		c.planExplain(st, x.ExplainStmt, f)
	case *pg_query.Node_TransactionStmt:
		planTransaction(st, x.TransactionStmt)
	case *pg_query.Node_VariableSetStmt:
		c.planSet(st, x.VariableSetStmt)
	case *pg_query.Node_VariableShowStmt:
		st.Kind, st.Name, st.ReadOnly = Show, x.VariableShowStmt.Name, true
		c.authoritative(st)
	default:
		c.planUtility(st, n, f)
	}
}

func (c *planCtx) planSelect(st *Statement, sel *pg_query.SelectStmt, f *facts) {
	st.Kind = Select
	st.ReadOnly = !f.locking && !f.modifyingCTE
	st.SideEffects = f.opaqueCall
	if sel.IntoClause != nil {
		if !c.topSelectInto(sel) {
			// DECLARE, COPY, PREPARE or a subquery: Postgres refuses it
			// in its own words.
			c.authoritative(st)
			return
		}
		query := proto.Clone(sel).(*pg_query.SelectStmt)
		query.IntoClause = nil
		c.planCreateTableAs(st, sel.IntoClause, &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: query}}, f)
		return
	}
	q := &query{kind: Select, read: true, sel: sel}
	if sel.Op == pg_query.SetOperation_SETOP_NONE {
		q.from = fromTables(sel.FromClause, nil)
	}
	c.planQuery(st, q, f)
	if f.setConfig && st.Err == nil {
		c.planSetConfig(st, sel)
	}
}

func (c *planCtx) planCopy(st *Statement, cs *pg_query.CopyStmt, f *facts) {
	if cs.Query != nil {
		// COPY (query) TO STDOUT routes like its query.
		c.dispatch(st, cs.Query, f)
	}
	st.Kind = Copy
	switch {
	case cs.Query != nil && hasInto(cs.Query):
		// Postgres refuses COPY (SELECT INTO) itself.
	case cs.Filename != "" || cs.IsProgram:
		st.Err = unsupported("COPY to or from a file or program on the server is not supported (use COPY ... FROM STDIN or TO STDOUT)")
	case cs.Query != nil:
		if st.Merge != MergeRows {
			// The router combines a SELECT's answers, not COPY data.
			st.Merge, st.Engine = MergeRows, nil
			if st.Err == nil {
				st.Err = unsupported("COPY of a query whose answer combines several shards (counts, merges, aggregates) is not supported yet")
			}
		}
	case cs.IsFrom:
		c.planQuery(st, &query{kind: Copy, target: cs.Relation, copy: cs}, f)
	default:
		st.ReadOnly = true
		c.planQuery(st, &query{kind: Copy, read: true, from: []*pg_query.RangeVar{cs.Relation}}, f)
	}
}

// authoritative routes st to the authoritative shard.
func (c *planCtx) authoritative(st *Statement) {
	st.Route, st.Targets = Authoritative, []string{c.top.AuthoritativeShard()}
}

// columnType asks the Schema for the type of a shard-key column.
func (c *planCtx) columnType(n TableName, column string) (shardfunc.ColumnType, error) {
	t, err := c.schema.ColumnType(n.Database, n.Schema, n.Table, column)
	if err != nil {
		c.noCache = true
	}
	return t, err
}

// columnNames asks the Schema for a table's columns in order.
func (c *planCtx) columnNames(n TableName) ([]string, error) {
	names, err := c.schema.ColumnNames(n.Database, n.Schema, n.Table)
	if err != nil {
		c.noCache = true
	}
	return names, err
}

// bindKeys fills the literal keys' Literal and Offset from the planned
// text; a cache hit with other literals does the same from its own text.
func (c *planCtx) bindKeys(st *Statement, start int) {
	for i := range st.Keys {
		bindKey(&st.Keys[i], c.sql, c.lits, start)
	}
}

func bindKey(k *Key, sql string, lits []span, start int) {
	if k.Param > 0 {
		return
	}
	sp := lits[k.lit]
	k.Literal, k.Offset = sql[sp.start:sp.end], sp.start-start
}

func trimSpace(s string, start, end int) (int, int) {
	for start < end && isSpace(s[start]) {
		start++
	}
	for end > start && isSpace(s[end-1]) {
		end--
	}
	return start, end
}
