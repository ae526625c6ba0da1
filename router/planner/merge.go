package planner

import (
	"math"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tesseradb/tessera/router/engine"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// MergeKind says how the router combines the answers of a read that runs
// on several shards, beyond passing their rows on.
type MergeKind int

const (
	// MergeRows: the shards' rows, concatenated, are the answer.
	MergeRows MergeKind = iota
	// MergeLimit: a SELECT with a LIMIT and no ORDER BY, which asks for
	// any n rows; each shard returns at most n, and the first n of their
	// rows are the answer (Statement.Limit says n).
	MergeLimit
	// MergeEngine: the router runs Statement.Engine, a tree of operators
	// (package engine), over the shards' answers to the statement as
	// written: each shard's rows are partial aggregates, sorted runs or
	// distinct rows that the operators finish.
	MergeEngine
)

// Limit is the n of a LIMIT the router applies across shards: a value
// written in the statement, or the parameter that holds it.
type Limit struct {
	Value int64 // when Param is 0
	Param int   // 1-based parameter number, or 0
}

// limitOnly reports whether q is a SELECT whose only cross-shard construct
// is its own LIMIT (no ORDER BY, OFFSET, aggregate, GROUP BY, DISTINCT,
// LIMIT in a subquery, ...), and returns it: the first n rows of the
// shards' answers, each limited to n, are then a valid answer, as any n
// rows are.
func (c *planCtx) limitOnly(q *query, f *facts) (Limit, bool) {
	s := q.sel
	// FOR UPDATE would lock rows on every shard, more than the n returned.
	if s == nil || f.crossOther || f.aggCalls > 0 || f.groups > 0 || f.distincts > 0 || f.offsets > 0 || f.havings > 0 || f.limits != 1 || f.orders > 0 || f.locking ||
		s.Op != pg_query.SetOperation_SETOP_NONE || s.LimitCount == nil || s.LimitOffset != nil || len(s.SortClause) > 0 {
		return Limit{}, false
	}
	switch n := s.LimitCount.GetNode().(type) {
	case *pg_query.Node_AConst:
		// The value is part of the plan, and so is whether it is usable:
		// cache the plan under its text.
		c.exact = true
		if v, ok := n.AConst.Val.(*pg_query.A_Const_Ival); ok && v.Ival.Ival >= 0 {
			return Limit{Value: int64(v.Ival.Ival)}, true
		}
	case *pg_query.Node_ParamRef:
		return Limit{Param: int(n.ParamRef.Number)}, n.ParamRef.Number > 0
	}
	return Limit{}, false
}

// enginePlan reports whether the router can finish q's answer from the
// shards' answers, and returns the operators' plan. Each shard runs the
// statement as written, or without the clauses that must apply after
// the merge (Plan.ShardSQL), so what it computes must be a partial the
// router can finish exactly:
//
//   - ORDER BY output columns of integer or bool type, LIMIT and OFFSET
//     as literals (no aggregation): each shard sends its first
//     LIMIT + OFFSET rows in order; a k-way merge, cut, is the answer.
//   - aggregates, with or without GROUP BY, or DISTINCT: each shard sends
//     its groups with partial aggregates (count, sum of int2, int4, int8
//     and numeric, min and max of integers, bool_and, bool_or, every;
//     FILTER allowed); the router groups them again by the key columns,
//     which must be output columns whose encodings are equal exactly when
//     Postgres's values are, and finishes the aggregates; then HAVING
//     (comparisons of shown integer aggregates with integer literals),
//     ORDER BY integer or bool outputs, LIMIT and OFFSET, all of which
//     the shards' SQL leaves out.
//   - over several colocated tables, a list of counts (countsPlan).
//
// Anything else is refused by the caller with its crossShard reason.
func (c *planCtx) enginePlan(q *query, f *facts, table *tableRef) (*engine.Plan, bool) {
	s := q.sel
	if s == nil || f.locking || s.Op != pg_query.SetOperation_SETOP_NONE {
		return nil, false
	}
	if f.crossOther {
		return nil, false
	}
	if table == nil {
		if s.LimitCount != nil || s.LimitOffset != nil {
			return nil, false
		}
		return countsPlan(s, f)
	}
	// The plan holds literals of the text (positions in ORDER BY and
	// GROUP BY, LIMIT and OFFSET counts, HAVING's constants, the shards'
	// SQL): cache it under its text, not its shape.
	c.exact = true
	offset, ok := literalCount(s.LimitOffset, 0)
	if !ok {
		return nil, false
	}
	limit, ok := literalCount(s.LimitCount, -1)
	if !ok {
		return nil, false
	}
	grouped := len(s.GroupClause) > 0 || s.GroupDistinct
	distinct := len(s.DistinctClause) > 0
	if distinct && (len(s.DistinctClause) != 1 || s.DistinctClause[0].GetNode() != nil) {
		return nil, false // DISTINCT ON
	}
	// Every construct the walk counted must be this SELECT's own.
	if f.groups != b2i(grouped) || f.distincts != b2i(distinct) || f.orders != b2i(len(s.SortClause) > 0) || f.limits != b2i(s.LimitCount != nil) || f.offsets != b2i(s.LimitOffset != nil) || f.havings != b2i(s.HavingClause != nil) {
		return nil, false
	}
	outs, ok := c.engineOutputs(s, table)
	if !ok {
		return nil, false
	}
	aggregated := f.aggCalls > 0 || grouped || distinct
	if !aggregated {
		if s.HavingClause != nil {
			return nil, false // HAVING without aggregates or GROUP BY: rare, and not finished here
		}
		return c.orderedPlan(s, table, outs, offset, limit)
	}
	if s.GroupDistinct || distinct && (grouped || f.aggCalls > 0) {
		return nil, false
	}
	calls := 0
	for _, o := range outs {
		if o.agg != engine.GroupKey {
			calls++
		}
	}
	var having []engine.Condition
	if s.HavingClause != nil {
		// The HAVING's aggregates are the outputs' own calls, counted
		// once more each.
		if having, ok = havingConditions(s.HavingClause, s.TargetList, outs); !ok {
			return nil, false
		}
		calls += len(having)
	}
	for _, n := range s.SortClause {
		// ORDER BY count(*): the output's call, counted once more.
		if call := n.GetSortBy().GetNode(); call.GetFuncCall() != nil && outputCall(s.TargetList, outs, call) >= 0 {
			calls++
		}
	}
	if calls != f.aggCalls {
		return nil, false // an aggregate inside an expression, a subquery, ...
	}
	keys := map[string]bool{}
	if grouped {
		if keys, ok = c.groupColumns(s, table, outs); !ok {
			return nil, false
		}
	}
	p := &engine.Plan{Scalar: !grouped && !distinct, Having: having, Offset: offset, Limit: limit}
	shown := map[string]bool{}
	for _, o := range outs {
		col := engine.AggColumn{Func: o.agg, Type: o.typ}
		if o.agg == engine.GroupKey && !o.constant {
			// A shown column must be a group key (DISTINCT: every output
			// is one), of a type whose encodings compare as its values.
			if o.column == "" || !(distinct || keys[o.column]) || !equalByBytes(o.colType) {
				return nil, false
			}
			shown[o.column] = true
		}
		p.Aggregate = append(p.Aggregate, col)
	}
	for k := range keys {
		if !shown[k] {
			return nil, false // a key the shards' rows do not show
		}
	}
	if len(s.SortClause) > 0 {
		if p.Sort, ok = c.sortKeys(s, table, outs); !ok {
			return nil, false
		}
	}
	if s.LimitCount != nil || s.LimitOffset != nil || s.HavingClause != nil {
		// Each shard answers all its groups; the router filters and
		// limits the final rows.
		shard := proto.Clone(s).(*pg_query.SelectStmt)
		shard.HavingClause = nil
		if p.ShardSQL = c.withLimit(shard, nil, nil); p.ShardSQL == "" {
			return nil, false
		}
	}
	return p, true
}

// havingConditions reads a HAVING that is a conjunction of comparisons
// of an output's integer aggregate (the same call, written the same way)
// with an integer literal.
func havingConditions(n *pg_query.Node, targets []*pg_query.Node, outs []engineOutput) ([]engine.Condition, bool) {
	if b := n.GetBoolExpr(); b != nil {
		if b.Boolop != pg_query.BoolExprType_AND_EXPR {
			return nil, false
		}
		var out []engine.Condition
		for _, arg := range b.Args {
			conds, ok := havingConditions(arg, targets, outs)
			if !ok {
				return nil, false
			}
			out = append(out, conds...)
		}
		return out, true
	}
	e := n.GetAExpr()
	if e == nil || e.Kind != pg_query.A_Expr_Kind_AEXPR_OP || len(e.Name) != 1 {
		return nil, false
	}
	op := e.Name[0].GetString_().GetSval()
	call, lit := e.Lexpr, e.Rexpr
	if lit.GetAConst() == nil {
		call, lit = lit, call
		op = flipped[op]
	}
	v, ok := lit.GetAConst().GetVal().(*pg_query.A_Const_Ival)
	if !ok || call.GetFuncCall() == nil || !validOps[op] {
		return nil, false
	}
	if i := outputCall(targets, outs, call); i >= 0 && outs[i].typ == engine.Int {
		return []engine.Condition{{Column: i, Op: op, Value: int64(v.Ival.Ival)}}, true
	}
	return nil, false
}

// outputCall finds the output that is an aggregate call written as call
// is, or -1.
func outputCall(targets []*pg_query.Node, outs []engineOutput, call *pg_query.Node) int {
	if len(targets) != len(outs) {
		return -1 // a * among the outputs
	}
	for i, t := range targets {
		if outs[i].agg != engine.GroupKey && sameExpr(t.GetResTarget().GetVal(), call) {
			return i
		}
	}
	return -1
}

// flipped is each comparison with its operands swapped (3 < x: x > 3).
var flipped = map[string]string{"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

var validOps = map[string]bool{"=": true, "<>": true, "<": true, "<=": true, ">": true, ">=": true}

// sameExpr reports whether two expressions are written alike, wherever
// they are in the text.
func sameExpr(a, b *pg_query.Node) bool {
	return proto.Equal(withoutLocations(a), withoutLocations(b))
}

func withoutLocations(n *pg_query.Node) *pg_query.Node {
	c := proto.Clone(n).(*pg_query.Node)
	clearLocations(c.ProtoReflect())
	return c
}

func clearLocations(m protoreflect.Message) {
	var located []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Name() == "location":
			located = append(located, fd)
		case fd.IsList() && fd.Message() != nil:
			for i, l := 0, v.List(); i < l.Len(); i++ {
				clearLocations(l.Get(i).Message())
			}
		case fd.Message() != nil && !fd.IsMap():
			clearLocations(v.Message())
		}
		return true
	})
	for _, fd := range located {
		m.Clear(fd)
	}
}

// withLimit is s deparsed with another LIMIT and OFFSET (nil: none).
func (c *planCtx) withLimit(s *pg_query.SelectStmt, limit, offset *pg_query.Node) string {
	shard := proto.Clone(s).(*pg_query.SelectStmt)
	shard.LimitCount, shard.LimitOffset = limit, offset
	if limit == nil {
		shard.LimitOption = pg_query.LimitOption_LIMIT_OPTION_DEFAULT
	}
	sql, err := pg_query.Deparse(&pg_query.ParseResult{Version: c.version, Stmts: []*pg_query.RawStmt{{Stmt: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: shard}}}}})
	if err != nil {
		return ""
	}
	return sql
}

// literalCount reads a LIMIT or OFFSET: absent (dflt), or an integer
// literal of at least 0. Anything else (a parameter, an expression, NULL,
// ALL) is not read.
func literalCount(n *pg_query.Node, dflt int64) (int64, bool) {
	if n == nil {
		return dflt, true
	}
	v, ok := n.GetAConst().GetVal().(*pg_query.A_Const_Ival)
	if !ok || v.Ival.Ival < 0 {
		return 0, false
	}
	return int64(v.Ival.Ival), true
}

func intConst(n int64) *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{Val: &pg_query.A_Const_Ival{Ival: &pg_query.Integer{Ival: int32(n)}}}}}
}

// countsPlan: a SELECT of several tables (colocated) whose every output
// column is a count and which combines nothing else: the sum of the
// shards' counts is the count over all the data.
func countsPlan(s *pg_query.SelectStmt, f *facts) (*engine.Plan, bool) {
	if f.groups > 0 || f.distincts > 0 || f.orders > 0 || f.limits > 0 || f.offsets > 0 || f.havings > 0 || len(s.TargetList) == 0 || len(s.TargetList) != f.aggCalls {
		return nil, false
	}
	p := &engine.Plan{Scalar: true, Limit: -1}
	for _, t := range s.TargetList {
		fc := t.GetResTarget().GetVal().GetFuncCall()
		if fc == nil || funcName(fc) != "count" || !builtinCall(fc) || fc.AggDistinct || fc.AggWithinGroup || len(fc.AggOrder) > 0 || fc.Over != nil ||
			fc.AggStar != (len(fc.Args) == 0) || len(fc.Args) > 1 {
			return nil, false
		}
		p.Aggregate = append(p.Aggregate, engine.AggColumn{Func: engine.SumCounts, Type: engine.Int})
	}
	return p, true
}

// orderedPlan: ORDER BY, LIMIT and OFFSET with nothing to aggregate.
// With an ORDER BY each shard sorts its rows and the router merges them;
// without one any rows will do. Each shard sends its first limit +
// offset rows; the router skips offset of the merged rows and passes on
// limit.
func (c *planCtx) orderedPlan(s *pg_query.SelectStmt, table *tableRef, outs []engineOutput, offset, limit int64) (*engine.Plan, bool) {
	if len(s.SortClause) == 0 && offset == 0 {
		return nil, false // a LIMIT alone is limitOnly's
	}
	p := &engine.Plan{Offset: offset, Limit: limit}
	if len(s.SortClause) > 0 {
		keys, ok := c.sortKeys(s, table, outs)
		if !ok {
			return nil, false
		}
		p.Merge = keys
	}
	if offset > 0 {
		var shardLimit *pg_query.Node
		if limit >= 0 {
			if limit+offset > math.MaxInt32 {
				return nil, false
			}
			shardLimit = intConst(limit + offset)
		}
		if p.ShardSQL = c.withLimit(s, shardLimit, nil); p.ShardSQL == "" {
			return nil, false
		}
	}
	return p, true
}

// engineOutput is one output column of a single-table SELECT as the
// engine sees it: its name, the table column it shows ("" for anything
// else) and that column's type, or the aggregate it is.
type engineOutput struct {
	name, column string
	colType      shardfunc.ColumnType // 0: not a column, or of a type the planner does not know
	agg          engine.AggFunc       // GroupKey: not an aggregate
	constant     bool                 // a literal: the same bytes from every shard
	typ          engine.Type          // how the engine reads the value
}

// engineOutputs lists s's output columns: * expands to the table's
// columns; a column reference shows that column; an aggregate call is
// classified by mergeableAggregate. Anything else is an expression the
// engine cannot see into (colType 0, not an aggregate).
func (c *planCtx) engineOutputs(s *pg_query.SelectStmt, table *tableRef) ([]engineOutput, bool) {
	var out []engineOutput
	for _, t := range s.TargetList {
		rt := t.GetResTarget()
		if rt == nil {
			return nil, false
		}
		cr := rt.GetVal().GetColumnRef()
		if cr != nil && isStar(cr) {
			if rt.Name != "" || len(cr.Fields) > 1 && !refersTo(cr, table) {
				return nil, false
			}
			cols, err := c.columnNames(table.name)
			if err != nil {
				return nil, false
			}
			for _, col := range cols {
				out = append(out, c.columnOutput(table, col, col))
			}
			continue
		}
		if cr != nil {
			if len(cr.Fields) > 1 && !refersTo(cr, table) {
				return nil, false
			}
			name := rt.Name
			if name == "" {
				name = lastField(cr)
			}
			out = append(out, c.columnOutput(table, name, lastField(cr)))
			continue
		}
		o := engineOutput{name: rt.Name, constant: rt.GetVal().GetAConst() != nil}
		if fc := rt.GetVal().GetFuncCall(); fc != nil {
			agg, typ, ok := c.mergeableAggregate(fc, table)
			if !ok {
				return nil, false
			}
			o.agg, o.typ = agg, typ
		}
		out = append(out, o)
	}
	return out, true
}

func (c *planCtx) columnOutput(table *tableRef, name, column string) engineOutput {
	o := engineOutput{name: name, column: column}
	if t, err := c.columnType(table.name, column); err == nil {
		o.colType = t
		o.typ = engineType(t)
	}
	return o
}

// engineType is how the engine reads a column of type t: integers and
// booleans as values, the rest as bytes it does not order.
func engineType(t shardfunc.ColumnType) engine.Type {
	switch {
	case t.IsInteger():
		return engine.Int
	case t == shardfunc.Bool:
		return engine.Bool
	case t == shardfunc.Numeric:
		return engine.Numeric
	}
	return engine.Opaque
}

// equalByBytes reports whether two values of type t are equal in Postgres
// exactly when their encodings (in one format, under the same settings)
// are: not numeric (1.0 = 1.00), bpchar (trailing blanks), timestamps
// (their text depends on TimeZone and DateStyle) or name. Text and varchar
// compare by bytes under a deterministic collation, which every collation
// but a nondeterministic ICU one is.
func equalByBytes(t shardfunc.ColumnType) bool {
	switch t {
	case shardfunc.Int2, shardfunc.Int4, shardfunc.Int8, shardfunc.Bool, shardfunc.Text, shardfunc.Varchar, shardfunc.UUID, shardfunc.Date:
		return true
	}
	return false
}

// mergeableAggregate classifies a built-in aggregate call whose shard
// partials the engine finishes exactly, with Postgres's result type.
func (c *planCtx) mergeableAggregate(fc *pg_query.FuncCall, table *tableRef) (engine.AggFunc, engine.Type, bool) {
	// DISTINCT would count a value found on two shards twice; an ORDER
	// BY inside or WITHIN GROUP belongs to other aggregates.
	if !builtinCall(fc) || fc.AggDistinct || fc.AggWithinGroup || len(fc.AggOrder) > 0 || fc.Over != nil || fc.AggStar != (len(fc.Args) == 0) || len(fc.Args) > 1 {
		return 0, 0, false
	}
	name := funcName(fc)
	if name == "count" {
		return engine.SumCounts, engine.Int, true
	}
	if fc.AggStar {
		return 0, 0, false
	}
	switch name {
	case "bool_and", "every":
		return engine.BoolAnd, engine.Bool, true
	case "bool_or":
		return engine.BoolOr, engine.Bool, true
	}
	// sum, min and max: their result type is the argument's, known here
	// for a plain column only.
	cr := fc.Args[0].GetColumnRef()
	if cr == nil || isStar(cr) || len(cr.Fields) > 1 && !refersTo(cr, table) {
		return 0, 0, false
	}
	t, err := c.columnType(table.name, lastField(cr))
	if err != nil {
		return 0, 0, false
	}
	switch {
	case name == "sum" && (t == shardfunc.Int2 || t == shardfunc.Int4):
		return engine.SumInt8, engine.Int, true
	case name == "sum" && (t == shardfunc.Int8 || t == shardfunc.Numeric):
		return engine.SumNumeric, engine.Numeric, true
	case name == "min" && t.IsInteger():
		return engine.Min, engine.Int, true
	case name == "max" && t.IsInteger():
		return engine.Max, engine.Int, true
	}
	return 0, 0, false
}

// groupColumns resolves a GROUP BY of table columns (by name, qualified
// name or output position) to their names.
func (c *planCtx) groupColumns(s *pg_query.SelectStmt, table *tableRef, outs []engineOutput) (map[string]bool, bool) {
	cols, err := c.columnNames(table.name)
	if err != nil {
		return nil, false
	}
	keys := map[string]bool{}
	for _, n := range s.GroupClause {
		switch x := n.GetNode().(type) {
		case *pg_query.Node_AConst:
			p, ok := x.AConst.Val.(*pg_query.A_Const_Ival)
			if !ok || p.Ival.Ival < 1 || int(p.Ival.Ival) > len(outs) || outs[p.Ival.Ival-1].column == "" {
				return nil, false
			}
			keys[outs[p.Ival.Ival-1].column] = true
		case *pg_query.Node_ColumnRef:
			// GROUP BY reads a bare name as the table's column first.
			name := lastField(x.ColumnRef)
			if isStar(x.ColumnRef) || len(x.ColumnRef.Fields) > 1 && !refersTo(x.ColumnRef, table) || !contains(cols, name) {
				return nil, false
			}
			keys[name] = true
		default:
			return nil, false // an expression, GROUPING SETS, ROLLUP, CUBE
		}
	}
	return keys, true
}

// sortKeys resolves an ORDER BY of output columns (by position, output
// name, or qualified table column) the engine can order: integers and
// booleans.
func (c *planCtx) sortKeys(s *pg_query.SelectStmt, table *tableRef, outs []engineOutput) ([]engine.SortKey, bool) {
	var keys []engine.SortKey
	for _, n := range s.SortClause {
		sb := n.GetSortBy()
		if sb == nil || sb.SortbyDir == pg_query.SortByDir_SORTBY_USING || len(sb.UseOp) > 0 {
			return nil, false
		}
		col := -1
		switch x := sb.Node.GetNode().(type) {
		case *pg_query.Node_AConst:
			if p, ok := x.AConst.Val.(*pg_query.A_Const_Ival); ok && p.Ival.Ival >= 1 && int(p.Ival.Ival) <= len(outs) {
				col = int(p.Ival.Ival) - 1
			}
		case *pg_query.Node_FuncCall:
			col = outputCall(s.TargetList, outs, sb.Node)
		case *pg_query.Node_ColumnRef:
			// A bare name is an output column's name first; a qualified
			// one (items.k) is always the table's column, whatever output
			// column is named like it.
			name := lastField(x.ColumnRef)
			qualified := len(x.ColumnRef.Fields) > 1
			if qualified && !refersTo(x.ColumnRef, table) {
				return nil, false
			}
			col = outputNamed(outs, name, qualified)
			if col < 0 && !qualified {
				// A bare name no output has is the table's column.
				col = outputNamed(outs, name, true)
			}
		}
		if col < 0 {
			return nil, false
		}
		o := outs[col]
		if o.agg == engine.GroupKey && o.column == "" || o.typ != engine.Int && o.typ != engine.Bool {
			return nil, false
		}
		desc := sb.SortbyDir == pg_query.SortByDir_SORTBY_DESC
		nullsFirst := desc // Postgres's default
		switch sb.SortbyNulls {
		case pg_query.SortByNulls_SORTBY_NULLS_FIRST:
			nullsFirst = true
		case pg_query.SortByNulls_SORTBY_NULLS_LAST:
			nullsFirst = false
		}
		keys = append(keys, engine.SortKey{Column: col, Type: o.typ, Desc: desc, NullsFirst: nullsFirst})
	}
	return keys, true
}

// outputNamed finds the output named name, or (byColumn) showing the
// table's column name: -1 for none, or for several that are not all the
// same column.
func outputNamed(outs []engineOutput, name string, byColumn bool) int {
	col := -1
	for i, o := range outs {
		if !byColumn && o.name == name || byColumn && o.column == name {
			if col >= 0 && (o.column == "" || o.column != outs[col].column) {
				return -2 // ambiguous
			}
			if col < 0 {
				col = i
			}
		}
	}
	return col
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func lastField(cr *pg_query.ColumnRef) string {
	if len(cr.Fields) == 0 {
		return ""
	}
	return cr.Fields[len(cr.Fields)-1].GetString_().GetSval()
}

func isStar(cr *pg_query.ColumnRef) bool {
	return len(cr.Fields) > 0 && cr.Fields[len(cr.Fields)-1].GetAStar() != nil
}

// refersTo reports whether a qualified column reference's qualifier is
// the table's name or alias.
func refersTo(cr *pg_query.ColumnRef, table *tableRef) bool {
	q := cr.Fields[len(cr.Fields)-2].GetString_().GetSval()
	return q == table.rv.GetRelname() || table.rv.GetAlias() != nil && q == table.rv.GetAlias().GetAliasname()
}
