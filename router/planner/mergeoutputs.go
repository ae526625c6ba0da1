package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/tesseradb/tessera/router/engine"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// The output columns of an engine plan's SELECT: which are table columns
// (of which type), which are aggregates the engine finishes, and the
// GROUP BY and ORDER BY items that name them.

// engineOutput is one output column of a single-table SELECT as the
// engine sees it: its name, the table column it shows ("" for anything
// else) and that column's type, or the aggregate it is.
type engineOutput struct {
	name, column string
	colType      shardfunc.ColumnType // 0: not a column, or of a type the planner does not know
	agg          engine.AggFunc       // GroupKey: not an aggregate
	constant     bool                 // a literal: the same bytes from every shard
	typ          engine.Type          // how the engine reads the value
	call         *pg_query.FuncCall   // an aggregate's call
	// distinct: count or sum (DISTINCT x): x's column.
	distinct string
}

// engineOutputs lists s's output columns: * expands to the table's
// columns; a column reference shows that column; an aggregate call is
// classified by mergeableAggregate. Anything else is an expression the
// engine cannot see into (colType 0, not an aggregate).
func (c *planCtx) engineOutputs(s *pg_query.SelectStmt, scope *mergeScope) ([]engineOutput, bool) {
	var out []engineOutput
	for _, t := range s.TargetList {
		rt := t.GetResTarget()
		if rt == nil {
			return nil, false
		}
		cr := rt.GetVal().GetColumnRef()
		if cr != nil && isStar(cr) {
			if rt.Name != "" || !scope.single() || len(cr.Fields) > 1 && !scope.refers(cr) {
				return nil, false
			}
			cols, err := c.columnNames(scope.tables[0].name)
			if err != nil {
				return nil, false
			}
			for _, col := range cols {
				out = append(out, c.columnOutput(scope, col, col))
			}
			continue
		}
		if cr != nil {
			if len(cr.Fields) > 1 && !scope.refers(cr) {
				return nil, false
			}
			name := rt.Name
			if name == "" {
				name = lastField(cr)
			}
			out = append(out, c.columnOutput(scope, name, lastField(cr)))
			continue
		}
		o := engineOutput{name: rt.Name, constant: rt.GetVal().GetAConst() != nil}
		if fc := rt.GetVal().GetFuncCall(); fc != nil {
			a, ok := c.mergeableAggregate(fc, scope)
			if !ok {
				return nil, false
			}
			o.agg, o.typ, o.distinct, o.call = a.fn, a.typ, a.distinct, fc
		}
		out = append(out, o)
	}
	return out, true
}

func (c *planCtx) columnOutput(scope *mergeScope, name, column string) engineOutput {
	o := engineOutput{name: name, column: column}
	if t, err := scope.columnType(c, column); err == nil {
		o.colType = t
		o.typ = engineType(t)
		if scope.byteOrdered(c, column, t) {
			o.typ = engine.Bytes
		}
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

// aggCall is how the engine finishes one aggregate call.
type aggCall struct {
	fn       engine.AggFunc
	typ      engine.Type // of its result
	distinct string      // count or sum (DISTINCT x): x's column
}

// mergeableAggregate classifies a built-in aggregate call whose shard
// partials the engine finishes exactly, with Postgres's result type.
func (c *planCtx) mergeableAggregate(fc *pg_query.FuncCall, scope *mergeScope) (aggCall, bool) {
	// An ORDER BY inside or WITHIN GROUP belongs to other aggregates.
	if !builtinCall(fc) || fc.AggWithinGroup || len(fc.AggOrder) > 0 || fc.Over != nil || fc.AggStar != (len(fc.Args) == 0) || len(fc.Args) > 1 {
		return aggCall{}, false
	}
	name := funcName(fc)
	if fc.AggDistinct {
		return c.distinctAggregate(fc, name, scope)
	}
	if name == "count" {
		return aggCall{fn: engine.SumCounts, typ: engine.Int}, true
	}
	if fc.AggStar {
		return aggCall{}, false
	}
	switch name {
	case "bool_and", "every":
		return aggCall{fn: engine.BoolAnd, typ: engine.Bool}, true
	case "bool_or":
		return aggCall{fn: engine.BoolOr, typ: engine.Bool}, true
	}
	// sum, min, max and avg: their result type follows the argument's,
	// known here for a plain column only.
	col, t, ok := c.argColumn(fc, scope)
	if !ok {
		return aggCall{}, false
	}
	switch {
	case name == "sum" && (t == shardfunc.Int2 || t == shardfunc.Int4):
		return aggCall{fn: engine.SumInt8, typ: engine.Int}, true
	case name == "sum" && (t == shardfunc.Int8 || t == shardfunc.Numeric):
		return aggCall{fn: engine.SumNumeric, typ: engine.Numeric}, true
	case name == "avg" && (t.IsInteger() || t == shardfunc.Numeric):
		// From a sum and a count in hidden columns (hiddenColumns).
		return aggCall{fn: engine.Avg, typ: engine.Numeric}, true
	case name == "min" && t.IsInteger():
		return aggCall{fn: engine.Min, typ: engine.Int}, true
	case name == "max" && t.IsInteger():
		return aggCall{fn: engine.Max, typ: engine.Int}, true
	case (name == "min" || name == "max") && scope.byteOrdered(c, col, t):
		// text_smaller and text_larger under C compare bytes; the result
		// is text whatever the column's type (varchar too).
		fn := engine.Min
		if name == "max" {
			fn = engine.Max
		}
		return aggCall{fn: fn, typ: engine.Bytes}, true
	}
	return aggCall{}, false
}

// distinctAggregate: count(DISTINCT x) of a column whose values are equal
// exactly when their bytes are, and sum(DISTINCT x) of an integer column.
// Each shard groups by x too; the router drops the groups found on
// several shards (Plan.PreAggregate) and then counts or sums the values.
func (c *planCtx) distinctAggregate(fc *pg_query.FuncCall, name string, scope *mergeScope) (aggCall, bool) {
	col, t, ok := c.argColumn(fc, scope)
	if !ok || fc.AggStar || !scope.groupable(c, col, t) {
		return aggCall{}, false
	}
	switch {
	case name == "count":
		return aggCall{fn: engine.SumCounts, typ: engine.Int, distinct: col}, true
	case name == "sum" && (t == shardfunc.Int2 || t == shardfunc.Int4):
		return aggCall{fn: engine.SumInt8, typ: engine.Int, distinct: col}, true
	case name == "sum" && t == shardfunc.Int8:
		return aggCall{fn: engine.SumNumeric, typ: engine.Numeric, distinct: col}, true
	}
	return aggCall{}, false
}

// argColumn is the table column an aggregate's one argument names, and
// its type.
func (c *planCtx) argColumn(fc *pg_query.FuncCall, scope *mergeScope) (string, shardfunc.ColumnType, bool) {
	if len(fc.Args) != 1 {
		return "", 0, false
	}
	cr := fc.Args[0].GetColumnRef()
	if cr == nil || isStar(cr) || len(cr.Fields) > 2 || len(cr.Fields) > 1 && !scope.refers(cr) {
		return "", 0, false
	}
	t, err := scope.columnType(c, lastField(cr))
	if err != nil {
		return "", 0, false
	}
	return lastField(cr), t, true
}

// groupColumns resolves a GROUP BY of table columns (by name, qualified
// name or output position) to their names.
func (c *planCtx) groupColumns(s *pg_query.SelectStmt, scope *mergeScope, outs []engineOutput) (map[string]bool, bool) {
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
			if isStar(x.ColumnRef) || len(x.ColumnRef.Fields) > 1 && !scope.refers(x.ColumnRef) || !scope.has(c, name) {
				return nil, false
			}
			keys[name] = true
		default:
			return nil, false // an expression, GROUPING SETS, ROLLUP, CUBE
		}
	}
	return keys, true
}

// sortKeys resolves an ORDER BY the engine can order: integers,
// booleans, numerics and text under C (byteOrdered). An item is an output column (by position,
// output name, or qualified table column) or, when no output is it, a
// hidden column (h): in an aggregated plan an aggregate call or a group
// key the statement does not show, otherwise a table column.
func (c *planCtx) sortKeys(s *pg_query.SelectStmt, scope *mergeScope, outs []engineOutput, h *hiddenColumns, aggregated bool) ([]engine.SortKey, bool) {
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
			if col < 0 && aggregated && len(s.TargetList) == len(outs) {
				a, ok := c.mergeableAggregate(x.FuncCall, scope)
				if !ok || a.distinct != "" {
					return nil, false
				}
				col = h.addAggregate(x.FuncCall, a)
			}
		case *pg_query.Node_ColumnRef:
			// A bare name is an output column's name first; a qualified
			// one (items.k) is always the table's column, whatever output
			// column is named like it.
			name := lastField(x.ColumnRef)
			qualified := len(x.ColumnRef.Fields) > 1
			if isStar(x.ColumnRef) || len(x.ColumnRef.Fields) > 2 || qualified && !scope.refers(x.ColumnRef) {
				return nil, false
			}
			col = outputNamed(outs, name, qualified)
			if col < 0 && !qualified {
				// A bare name no output has is the table's column.
				col = outputNamed(outs, name, true)
			}
			if col == -1 {
				col = c.hiddenSortColumn(scope, name, h, aggregated)
			}
		}
		if col < 0 {
			return nil, false
		}
		o := h.output(outs, col)
		if o.agg == engine.GroupKey && o.column == "" || o.typ != engine.Int && o.typ != engine.Bool && o.typ != engine.Numeric && o.typ != engine.Bytes {
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

// hiddenSortColumn is the hidden column of a sort key that is the
// table's column name and no output: in an aggregated plan a group key
// already hidden (any other column is an error Postgres raises), else a
// new hidden column. -1: none.
func (c *planCtx) hiddenSortColumn(scope *mergeScope, name string, h *hiddenColumns, aggregated bool) int {
	if col := h.column(name); col >= 0 || aggregated {
		return col
	}
	if _, err := scope.columnType(c, name); err != nil {
		return -1
	}
	return h.add(scope.ref(name), c.columnOutput(scope, name, name))
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
