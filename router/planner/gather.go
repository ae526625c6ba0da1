package planner

import (
	"cmp"
	"fmt"
	"slices"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// Gather and compute (issue #16): a read-only SELECT that the shards
// cannot answer alone and the router's engine cannot merge (joins not on
// the shard key or across shard groups, windows, subqueries, CTEs, set
// operations, orderings of other types...) is computed by Postgres
// itself. The rows each table reference needs are pulled from the shards
// that hold them, with the columns the statement names and the filters
// of its WHERE that apply to that table alone pushed down; they are
// loaded into temporary tables of a transaction on the authoritative
// shard's primary, opened for this statement only, and the statement,
// its table references rewritten to those temporary tables, runs there.
// Its answer (RowDescription, rows, command tag, errors) is Postgres's.
// The router runs it (router/gather.go); this file decides when it
// applies and writes the SQL.
//
// It replaces a refusal only: a statement the shards or the engine
// answer keeps that plan. It applies to a top-level SELECT (also under
// EXPLAIN (TESSERA)) that only reads: no locking clause, data-modifying
// WITH, SELECT INTO, sequence function, set_config or function not known
// to be free of side effects (which would run on another backend, in
// another transaction, than the client's), and no session state. Column
// references are resolved by name only, so anything that would need
// Postgres's own resolution keeps the refusal: a column reference with a
// schema-qualified table (three names or more), a whole-row reference
// (a bare table name used as a value), FROM ONLY.

// GatherPlan is how a statement is answered by gathering: every table it
// reads pulled into the computing Postgres, which runs SQL.
type GatherPlan struct {
	// Tables are the tables pulled, one temporary table each.
	Tables []GatherTable
	// Compute is the shard whose primary computes the answer: the
	// authoritative shard, which has every table's definition (DDL runs
	// everywhere) and the authoritative copies of functions and types.
	Compute string
	// SQL is the statement the computing Postgres runs: the client's,
	// its table references rewritten to the temporary tables (aliased by
	// the name or alias they had), deparsed by pg_query. Parameters keep
	// their numbers.
	SQL string
	// TxTime: the statement reads the transaction's start time (now(),
	// CURRENT_DATE...) or its backend's pid, which the computing
	// transaction does not share with the client's own: the router
	// refuses it inside a transaction (outside one, the statement is
	// its own transaction on one Postgres too).
	TxTime bool
}

// GatherTable is one table a gathered statement reads.
type GatherTable struct {
	Table TableName
	// Temp is the temporary table's name (in pg_temp).
	Temp string
	// Shards are where its rows are pulled from: every shard of a
	// sharded table's group, one shard holding a reference table (the
	// authoritative one when it has a copy), a single-shard group's shard.
	Shards []string
	// Create makes the temporary table with the pulled columns' types,
	// typmods and collations (CREATE TEMP TABLE ... AS SELECT cols FROM
	// table WITH NO DATA), dropped at the end of the computing
	// transaction.
	Create string
	// Pull is the SELECT each of Shards runs for its rows (sent as COPY
	// (Pull) TO STDOUT in binary).
	Pull string
	// Pushed counts the WHERE conjuncts pushed down into Pull.
	Pushed int
	// Lookup, when set, restricts the pull to the shards and keys that
	// another table's pulled rows hold (gather_lookup.go).
	Lookup *GatherLookup
	// Indexes are CREATE INDEX statements for the pulled columns the
	// statement equates with another column (a join, a correlated
	// subquery, IN (SELECT ...)): Postgres answers those from the
	// tables' indexes on one database, and would otherwise scan the
	// temporary table once per outer row. The router runs them when the
	// table got enough rows to be worth it (gather_copy.go).
	Indexes []string
}

// gatherTempPrefix starts the name of every temporary table a gather
// makes.
const gatherTempPrefix = "tessera_gather_"

// Shards lists every shard a gather reaches: the computing shard first,
// then those it pulls from.
func (g *GatherPlan) Shards() []string {
	out := []string{g.Compute}
	for _, t := range g.Tables {
		out = appendNew(out, t.Shards...)
	}
	return out
}

// describe is EXPLAIN (TESSERA)'s view of a gather.
func (g *GatherPlan) describe() []string {
	lines := []string{"Gather and compute on shard " + g.Compute + ": " + g.SQL}
	for _, t := range g.Tables {
		lines = append(lines, fmt.Sprintf("  Gather %s into pg_temp.%s (%d filters pushed down)", t.Table, t.Temp, t.Pushed))
		if lk := t.Lookup; lk != nil {
			lines = append(lines, fmt.Sprintf("    Batched lookup: the shards owning the values of column %d of pg_temp.%s, each: %s", lk.FromColumn+1, lk.From, lk.Pull),
				fmt.Sprintf("    Past %d values or %d bytes of them, every shard:", MaxLookupKeys, MaxLookupBytes))
		}
		for _, s := range t.Shards {
			lines = append(lines, "    Shard "+s+": "+t.Pull)
		}
		for _, ix := range t.Indexes {
			lines = append(lines, "    Then, with enough rows: "+ix)
		}
	}
	return lines
}

// planGather gives a read the shards cannot answer alone a gather plan
// instead of its refusal (st.Err), or, for a route by shard-key values
// whose values may reach several shards (st.multiShard, keys of several
// tables), a gather plan the router uses when they do.
func (c *planCtx) planGather(st *Statement, q *query, refs []*tableRef, f *facts) {
	refused := st.Err != nil && gatherReplaces(st.Err)
	fallback := st.Err == nil && st.Route == Shard && (st.multiShard != nil || hasSeparateKeys(st.Keys))
	if !refused && !fallback || c.in.NoGather || !c.gatherable(q, f, st) {
		return
	}
	if orderDependent(q.sel) || c.inexactAggregates(q.sel, refs) || c.keepsOneOfEqual(q.sel, refs) {
		return
	}
	g, ok := c.gatherPlan(q.sel, refs)
	if !ok {
		return
	}
	st.Gather = g
	// The SQL holds the statement's literals: a statement of the same
	// shape must be planned afresh.
	c.exact = true
	if refused {
		st.Err, st.Route, st.Targets, st.Keys, st.multiShard = nil, Gathered, g.Shards(), nil, nil
		st.Merge, st.Engine, st.Limit = MergeRows, nil, Limit{}
	}
}

// gatherReplaces reports whether a refusal is one gathering answers:
// what needs rows of several shards combined.
func gatherReplaces(err error) bool {
	msg := err.Error()
	if strings.Contains(msg, "user-defined") {
		// A user's aggregate may call functions that write, which the
		// computing transaction (rolled back) would silently undo.
		return false
	}
	return strings.Contains(msg, "across shards is not supported yet") ||
		strings.Contains(msg, "a join across shard groups")
}

func hasSeparateKeys(keys []Key) bool {
	for _, k := range keys {
		if k.Separate {
			return true
		}
	}
	return false
}

// gatherable reports whether the statement may be gathered at all.
func (c *planCtx) gatherable(q *query, f *facts, st *Statement) bool {
	if q.kind != Select || q.sel == nil || q.sel.IntoClause != nil || !st.ReadOnly {
		return false
	}
	if f.locking || f.modifyingCTE || f.opaqueCall || f.sequenceCall || f.setConfig || f.session != 0 || st.SessionState != 0 {
		return false
	}
	// Only the client's statement itself (or under EXPLAIN (TESSERA)):
	// not inside COPY, DECLARE, PREPARE or a plain EXPLAIN, which the
	// router sends to shards as written.
	switch x := c.raw.Stmt.GetNode().(type) {
	case *pg_query.Node_SelectStmt:
		return x.SelectStmt == q.sel
	case *pg_query.Node_ExplainStmt:
		return hasOption(x.ExplainStmt.Options, "tessera") && x.ExplainStmt.Query.GetSelectStmt() == q.sel
	}
	return false
}

// gatherOccurrence is one table reference of a gathered statement.
type gatherOccurrence struct {
	ref   *tableRef
	table int // index in GatherPlan.Tables
}

// gatherPlan writes the plan, or reports that the statement cannot be
// gathered safely.
func (c *planCtx) gatherPlan(sel *pg_query.SelectStmt, refs []*tableRef) (*GatherPlan, bool) {
	g := &GatherPlan{Compute: c.top.AuthoritativeShard()}
	var occ []gatherOccurrence
	index := map[TableName]int{}
	columns := map[TableName][]string{}
	qualifiers := map[string]bool{}
	for _, r := range refs {
		if r.catalog {
			continue
		}
		if !r.rv.Inh || r.rv.Catalogname != "" {
			return nil, false
		}
		qualifiers[r.qualifier()] = true
		i, ok := index[r.name]
		if !ok {
			cols, err := c.columnNames(r.name)
			if err != nil || len(cols) == 0 {
				return nil, false
			}
			i = len(g.Tables)
			index[r.name] = i
			columns[r.name] = cols
			g.Tables = append(g.Tables, GatherTable{Table: r.name, Temp: fmt.Sprintf("%s%d", gatherTempPrefix, i+1), Shards: gatherShards(r, c.top.AuthoritativeShard())})
		}
		occ = append(occ, gatherOccurrence{ref: r, table: i})
	}
	if len(occ) == 0 {
		return nil, false
	}
	known := map[string]bool{}
	for _, cols := range columns {
		for _, col := range cols {
			known[col] = true
		}
	}
	for name := range derivedOutputs(sel) {
		known[name] = true
	}
	used, ok := usedColumns(sel, qualifiers, known)
	if !ok {
		return nil, false
	}
	pushable := pushableFilters(sel, occ, columns)
	equated := equatedColumns(sel)
	pulled := make([][]string, len(g.Tables))
	for i := range g.Tables {
		t := &g.Tables[i]
		cols := columns[t.Table]
		whole := used.all
		for _, o := range occ {
			whole = whole || o.table == i && used.allOf[o.ref.qualifier()]
		}
		if !whole {
			cols = pickColumns(cols, used.names)
		}
		for _, o := range occ {
			if o.table == i && o.ref.rv.GetAlias().GetColnames() != nil {
				// Column aliases name the columns by position.
				cols = columns[t.Table]
			}
		}
		var filters []*pg_query.Node
		var rv *pg_query.RangeVar
		for _, o := range occ {
			if o.table == i {
				rv, filters = o.ref.rv, pushable[o.ref]
			}
		}
		pull, err := c.pullSQL(t.Table, rv, cols, filters)
		if err != nil {
			return nil, false
		}
		create, err := c.pullSQL(t.Table, nil, cols, nil)
		if err != nil {
			return nil, false
		}
		t.Pull, t.Pushed = pull, len(filters)
		pulled[i] = cols
		t.Create = "CREATE TEMP TABLE pg_temp." + t.Temp + " ON COMMIT DROP AS " + create + " WITH NO DATA"
		for _, col := range cols {
			if equated[col] {
				t.Indexes = append(t.Indexes, "CREATE INDEX ON pg_temp."+t.Temp+" ("+quoteIdentifier(col)+")")
			}
		}
	}
	c.planLookups(sel, occ, columns, g, pulled, pushable)
	sql, err := c.rewriteToTemps(sel, occ, g)
	if err != nil {
		return nil, false
	}
	g.SQL = sql
	g.TxTime = readsTxTime(sel)
	// A looked-up table loads after the table its keys come from (which
	// is never looked up itself).
	slices.SortStableFunc(g.Tables, func(a, b GatherTable) int {
		return cmp.Compare(lookedUp(a), lookedUp(b))
	})
	return g, true
}

// gatherShards is where a table's rows are pulled from.
func gatherShards(r *tableRef, authoritative string) []string {
	if r.place.IsReference() {
		have := referenceShards(r)
		if contains(have, authoritative) {
			return []string{authoritative}
		}
		return have[:1]
	}
	return r.place.Group.Shards()
}

// columnUse is which columns a statement names: all (a star, NATURAL
// JOIN) or those in names, by name whatever table they qualify; allOf
// are the qualifiers whose tables' columns are all pulled (a bare name
// that may be their whole row).
type columnUse struct {
	all   bool
	names map[string]bool
	allOf map[string]bool
}

// usedColumns finds the column names a statement uses. It reports false
// for references it cannot resolve by name: three names or more, or a
// bare table name (a whole-row value) that is no column's name. A bare
// name that is both a table's qualifier and a column's name (known: a
// table's column, a subquery's output, as TPC-H Q9's nation) is a column
// for Postgres where one of that name is in scope, else the whole row:
// the table's columns are all pulled, which gives the same row either
// way.
func usedColumns(sel *pg_query.SelectStmt, qualifiers, known map[string]bool) (columnUse, bool) {
	u := columnUse{names: map[string]bool{}, allOf: map[string]bool{}}
	ok := true
	walk(sel.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.ColumnRef:
			fields := x.Fields
			if len(fields) > 2 {
				ok = false
				return false
			}
			last := fields[len(fields)-1]
			if last.GetAStar() != nil {
				u.all = true
				return false
			}
			name := last.GetString_().GetSval()
			if len(fields) == 1 && qualifiers[name] {
				if !known[name] {
					ok = false
				}
				u.allOf[name] = true
			}
			u.names[name] = true
		case *pg_query.JoinExpr:
			if x.IsNatural {
				u.all = true
			}
			for _, n := range x.UsingClause {
				u.names[n.GetString_().GetSval()] = true
			}
		}
		return true
	})
	return u, ok
}

// pickColumns keeps the columns of cols that are in names, in the
// table's order; the first column when none is (a count(*), say), so
// that every row is pulled.
func pickColumns(cols []string, names map[string]bool) []string {
	var out []string
	for _, c := range cols {
		if names[c] {
			out = append(out, c)
		}
	}
	if len(out) == 0 {
		out = cols[:1]
	}
	return out
}

// pullSQL deparses SELECT cols FROM table [AS alias] [WHERE filters].
func (c *planCtx) pullSQL(t TableName, rv *pg_query.RangeVar, cols []string, filters []*pg_query.Node) (string, error) {
	from := &pg_query.RangeVar{Schemaname: t.Schema, Relname: t.Table, Inh: true, Relpersistence: "p"}
	qual := []*pg_query.Node(nil)
	if rv != nil && len(filters) > 0 {
		alias := rv.Relname
		if a := rv.GetAlias(); a != nil {
			alias = a.Aliasname
		}
		from.Alias = &pg_query.Alias{Aliasname: alias}
		qual = []*pg_query.Node{pg_query.MakeStrNode(alias)}
	}
	sel := &pg_query.SelectStmt{FromClause: []*pg_query.Node{{Node: &pg_query.Node_RangeVar{RangeVar: from}}}}
	for _, col := range cols {
		fields := append(append([]*pg_query.Node(nil), qual...), pg_query.MakeStrNode(col))
		sel.TargetList = append(sel.TargetList, pg_query.MakeResTargetNodeWithVal(
			&pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: &pg_query.ColumnRef{Fields: fields}}}, -1))
	}
	switch len(filters) {
	case 0:
	case 1:
		sel.WhereClause = filters[0]
	default:
		sel.WhereClause = pg_query.MakeBoolExprNode(pg_query.BoolExprType_AND_EXPR, filters, -1)
	}
	return pg_query.Deparse(&pg_query.ParseResult{Version: c.version, Stmts: []*pg_query.RawStmt{{Stmt: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}}}})
}

// rewriteToTemps deparses sel with every gathered reference naming its
// temporary table, aliased as the reference was named. The tree is
// changed only while it is deparsed.
func (c *planCtx) rewriteToTemps(sel *pg_query.SelectStmt, occ []gatherOccurrence, g *GatherPlan) (string, error) {
	saved := make([]*pg_query.RangeVar, len(occ))
	for i, o := range occ {
		rv := o.ref.rv
		saved[i] = proto.Clone(rv).(*pg_query.RangeVar)
		alias := rv.Alias
		if alias == nil {
			alias = &pg_query.Alias{Aliasname: rv.Relname}
		}
		rv.Schemaname, rv.Relname, rv.Alias = "pg_temp", g.Tables[o.table].Temp, alias
	}
	defer func() {
		for i, o := range occ {
			o.ref.rv.Schemaname, o.ref.rv.Relname, o.ref.rv.Alias = saved[i].Schemaname, saved[i].Relname, saved[i].Alias
		}
	}()
	return pg_query.Deparse(&pg_query.ParseResult{Version: c.version, Stmts: []*pg_query.RawStmt{{Stmt: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: sel}}}}})
}

// equatedColumns names the columns a statement equates with another
// column: a = b (in WHERE, ON or a subquery's WHERE) and a IN (SELECT b
// ...), by name whatever table qualifies them.
func equatedColumns(sel *pg_query.SelectStmt) map[string]bool {
	out := map[string]bool{}
	name := func(n *pg_query.Node) string {
		cr := n.GetColumnRef()
		if cr == nil || len(cr.Fields) == 0 {
			return ""
		}
		return cr.Fields[len(cr.Fields)-1].GetString_().GetSval()
	}
	walk(sel.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.A_Expr:
			if x.Kind == pg_query.A_Expr_Kind_AEXPR_OP && isEquals(x.Name) {
				if l, r := name(x.Lexpr), name(x.Rexpr); l != "" && r != "" {
					out[l], out[r] = true, true
				}
			}
		case *pg_query.SubLink:
			s := x.Subselect.GetSelectStmt()
			if x.SubLinkType == pg_query.SubLinkType_ANY_SUBLINK && s != nil && len(s.TargetList) == 1 {
				if l, r := name(x.Testexpr), name(s.TargetList[0].GetResTarget().GetVal()); l != "" && r != "" {
					out[l], out[r] = true, true
				}
			}
		}
		return true
	})
	return out
}

// quoteIdentifier quotes a column name for SQL text.
func quoteIdentifier(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

func lookedUp(t GatherTable) int {
	if t.Lookup != nil {
		return 1
	}
	return 0
}
