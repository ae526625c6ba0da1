package planner

import pg_query "github.com/pganalyze/pg_query_go/v6"

// MergeKind says how the router combines the answers of a read that runs
// on several shards, beyond passing their rows on.
type MergeKind int

const (
	// MergeRows: the shards' rows, concatenated, are the answer.
	MergeRows MergeKind = iota
	// MergeCounts: each shard answers one row of counts (a SELECT whose
	// every output column is count(*) or count(expr)); the answer is one
	// row of their sums.
	MergeCounts
	// MergeLimit: a SELECT with a LIMIT and no ORDER BY, which asks for
	// any n rows; each shard returns at most n, and the first n of their
	// rows are the answer (Statement.Limit says n).
	MergeLimit
	// MergeOrdered: a SELECT with ORDER BY integer output columns and a
	// LIMIT; each shard returns its first n rows in order, and the first
	// n of their merge are the answer (Statement.Order, Statement.Limit).
	MergeOrdered
)

// OrderKey is one ORDER BY item of a MergeOrdered statement: an output
// column (0-based) holding an integer.
type OrderKey struct {
	Column     int
	Desc       bool
	NullsFirst bool
}

// maxOrderedLimit bounds the rows a router holds to merge ordered answers:
// every shard's first n.
const maxOrderedLimit = 10000

// Limit is the n of a LIMIT the router applies across shards: a value
// written in the statement, or the parameter that holds it.
type Limit struct {
	Value int64 // when Param is 0
	Param int   // 1-based parameter number, or 0
}

// countsOnly reports whether q is a SELECT whose only cross-shard
// construct is its output list of counts: every output column a plain
// count(*) or count(expr) (FILTER allowed, DISTINCT not: a value counted
// on two shards would count twice), no other aggregate anywhere, and
// nothing else (GROUP BY, ORDER BY, LIMIT, DISTINCT, ...) to combine. The
// sum of the shards' counts is then exactly the count over all the data.
func countsOnly(q *query, f *facts) bool {
	s := q.sel
	if s == nil || f.crossOther || f.limits > 0 || f.orders > 0 || s.Op != pg_query.SetOperation_SETOP_NONE || len(s.TargetList) == 0 || len(s.TargetList) != f.aggCalls {
		return false
	}
	for _, t := range s.TargetList {
		fc := t.GetResTarget().GetVal().GetFuncCall()
		if fc == nil || funcName(fc) != "count" || fc.AggDistinct || fc.AggWithinGroup || len(fc.AggOrder) > 0 || fc.Over != nil {
			return false
		}
		if len(fc.Funcname) == 2 && fc.Funcname[0].GetString_().GetSval() != "pg_catalog" {
			return false // a count of another schema is somebody's own function
		}
		if !(fc.AggStar && len(fc.Args) == 0) && len(fc.Args) != 1 {
			return false
		}
	}
	return true
}

// limitOnly reports whether q is a SELECT whose only cross-shard construct
// is its own LIMIT (no ORDER BY, OFFSET, aggregate, LIMIT in a subquery,
// ...), and returns it: the first n rows of the shards' answers, each
// limited to n, are then a valid answer, as any n rows are.
func (c *planCtx) limitOnly(q *query, f *facts) (Limit, bool) {
	s := q.sel
	// FOR UPDATE would lock rows on every shard, more than the n returned.
	if s == nil || f.crossOther || f.aggCalls > 0 || f.limits != 1 || f.orders > 0 || f.locking || s.Op != pg_query.SetOperation_SETOP_NONE ||
		s.LimitCount == nil || s.LimitOffset != nil || len(s.SortClause) > 0 {
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

// orderedLimit reports whether q is a SELECT whose only cross-shard
// constructs are its own ORDER BY and LIMIT, ordering by output columns
// of integer type (the router compares integers exactly; text order
// depends on collations it cannot reproduce), with a literal LIMIT of at
// most maxOrderedLimit, and returns the keys and the limit. Each shard
// sorts and limits its own rows; the merge of their first n rows, cut
// at n, is the answer one Postgres would give (rows with equal keys may
// come in another order, as on Postgres between two runs).
func (c *planCtx) orderedLimit(q *query, f *facts, table *tableRef) ([]OrderKey, Limit, bool) {
	s := q.sel
	if s == nil || table == nil || f.crossOther || f.aggCalls > 0 || f.limits != 1 || f.orders != 1 || f.locking ||
		s.Op != pg_query.SetOperation_SETOP_NONE || len(s.SortClause) == 0 || s.LimitCount == nil || s.LimitOffset != nil {
		return nil, Limit{}, false
	}
	if s.LimitCount.GetAConst() != nil {
		// Whether the limit is usable depends on its value: cache the
		// plan under its text.
		c.exact = true
	}
	v, ok := s.LimitCount.GetAConst().GetVal().(*pg_query.A_Const_Ival)
	if !ok || v.Ival.Ival < 0 || v.Ival.Ival > maxOrderedLimit {
		return nil, Limit{}, false
	}
	outputs, ok := c.outputColumns(s, table)
	if !ok {
		return nil, Limit{}, false
	}
	var keys []OrderKey
	for _, n := range s.SortClause {
		sb := n.GetSortBy()
		if sb == nil || sb.SortbyDir == pg_query.SortByDir_SORTBY_USING || len(sb.UseOp) > 0 {
			return nil, Limit{}, false
		}
		col := -1
		switch x := sb.Node.GetNode().(type) {
		case *pg_query.Node_AConst:
			if p, ok := x.AConst.Val.(*pg_query.A_Const_Ival); ok && p.Ival.Ival >= 1 && int(p.Ival.Ival) <= len(outputs) {
				col = int(p.Ival.Ival) - 1
			}
		case *pg_query.Node_ColumnRef:
			// A bare name is an output column's name first; a qualified
			// one (items.k) is always the table's column, whatever output
			// column is named like it.
			name := lastField(x.ColumnRef)
			qualified := len(x.ColumnRef.Fields) > 1
			if qualified && !refersTo(x.ColumnRef, table) {
				return nil, Limit{}, false
			}
			for i, o := range outputs {
				if !qualified && o.name == name || qualified && o.column == name {
					if col >= 0 {
						return nil, Limit{}, false // ambiguous
					}
					col = i
				}
			}
		}
		if col < 0 || outputs[col].column == "" {
			return nil, Limit{}, false
		}
		typ, err := c.columnType(table.name, outputs[col].column)
		if err != nil || !typ.IsInteger() {
			return nil, Limit{}, false
		}
		desc := sb.SortbyDir == pg_query.SortByDir_SORTBY_DESC
		nullsFirst := desc // Postgres's default
		switch sb.SortbyNulls {
		case pg_query.SortByNulls_SORTBY_NULLS_FIRST:
			nullsFirst = true
		case pg_query.SortByNulls_SORTBY_NULLS_LAST:
			nullsFirst = false
		}
		keys = append(keys, OrderKey{Column: col, Desc: desc, NullsFirst: nullsFirst})
	}
	return keys, Limit{Value: int64(v.Ival.Ival)}, true
}

// output is one output column of a SELECT: its name, and the table
// column it shows ("" for an expression).
type output struct{ name, column string }

// outputColumns lists a single-table SELECT's output columns: * expands
// to the table's columns, a column reference shows that column.
func (c *planCtx) outputColumns(s *pg_query.SelectStmt, table *tableRef) ([]output, bool) {
	var out []output
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
				out = append(out, output{name: col, column: col})
			}
			continue
		}
		o := output{name: rt.Name}
		if cr != nil {
			if len(cr.Fields) > 1 && !refersTo(cr, table) {
				return nil, false
			}
			o.column = lastField(cr)
			if o.name == "" {
				o.name = o.column
			}
		}
		out = append(out, o)
	}
	return out, true
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
