package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
)

// Filters pushed into a gather's pulls: a conjunct of the top-level
// WHERE that names the columns of one table reference only, pushed into
// that table's pull. The computing Postgres still applies the whole
// WHERE: the pull only drops rows the statement would drop anyway. That
// holds when the reference is the table's only one in the statement and
// sits in the top-level FROM outside the nullable side of an outer join
// (a filter there is evaluated after the join: `a LEFT JOIN b ... WHERE
// b.x IS NULL` keeps rows no b row matched). A conjunct is pushed only
// when it is built of column references, constants, casts, operators,
// boolean connectives and NULL/boolean tests: no function calls (a
// volatile one would be evaluated twice), subqueries or parameters (the
// pulls take none). The shards evaluate it with the client's settings,
// as the computing Postgres would.

// pushableFilters returns, for each occurrence that may take some, the
// WHERE conjuncts it can take.
func pushableFilters(sel *pg_query.SelectStmt, occ []gatherOccurrence, columns map[TableName][]string) map[*tableRef][]*pg_query.Node {
	if sel.Op != pg_query.SetOperation_SETOP_NONE || sel.WhereClause == nil {
		return nil
	}
	count := map[TableName]int{}
	for _, o := range occ {
		count[o.ref.name]++
	}
	byRV := map[*pg_query.RangeVar]*tableRef{}
	for _, o := range occ {
		byRV[o.ref.rv] = o.ref
	}
	// Unqualified names resolve only when every item of the top-level
	// FROM is a table whose columns are known.
	top, plain := topFromTables(sel.FromClause, byRV)
	outer := map[*pg_query.RangeVar]bool{}
	nonNullable(sel.FromClause, outer)
	out := map[*tableRef][]*pg_query.Node{}
	for _, conj := range conjuncts(sel.WhereClause, nil) {
		owner, ok := filterOwner(conj, top, plain, columns)
		if !ok || owner == nil || count[owner.name] != 1 || !outer[owner.rv] || owner.rv.GetAlias().GetColnames() != nil {
			continue
		}
		out[owner] = append(out[owner], conj)
	}
	return out
}

// topFromTables lists the gathered references of the top-level FROM
// (through joins); plain reports that every item there is one of them.
func topFromTables(items []*pg_query.Node, byRV map[*pg_query.RangeVar]*tableRef) ([]*tableRef, bool) {
	var out []*tableRef
	plain := true
	var visit func(n *pg_query.Node)
	visit = func(n *pg_query.Node) {
		switch x := n.GetNode().(type) {
		case *pg_query.Node_RangeVar:
			if r := byRV[x.RangeVar]; r != nil {
				out = append(out, r)
			} else {
				plain = false
			}
		case *pg_query.Node_JoinExpr:
			if x.JoinExpr.Alias != nil {
				plain = false
			}
			visit(x.JoinExpr.Larg)
			visit(x.JoinExpr.Rarg)
		default:
			plain = false
		}
	}
	for _, n := range items {
		visit(n)
	}
	return out, plain
}

// nonNullable marks the tables of a FROM list whose rows no outer join
// may replace by NULLs.
func nonNullable(items []*pg_query.Node, out map[*pg_query.RangeVar]bool) {
	for _, n := range items {
		switch x := n.GetNode().(type) {
		case *pg_query.Node_RangeVar:
			out[x.RangeVar] = true
		case *pg_query.Node_JoinExpr:
			j := x.JoinExpr
			switch j.Jointype {
			case pg_query.JoinType_JOIN_INNER:
				nonNullable([]*pg_query.Node{j.Larg, j.Rarg}, out)
			case pg_query.JoinType_JOIN_LEFT:
				nonNullable([]*pg_query.Node{j.Larg}, out)
			case pg_query.JoinType_JOIN_RIGHT:
				nonNullable([]*pg_query.Node{j.Rarg}, out)
			}
		}
	}
}

// filterOwner returns the one reference whose columns a conjunct names
// (nil if it names none), or false if the conjunct holds something that
// must not be pushed or a name it cannot place.
func filterOwner(conj *pg_query.Node, top []*tableRef, plain bool, columns map[TableName][]string) (*tableRef, bool) {
	var owner *tableRef
	ok := true
	claim := func(r *tableRef) {
		if owner != nil && owner != r {
			ok = false
		}
		owner = r
	}
	walk(conj.ProtoReflect(), func(m proto.Message) bool {
		if !ok {
			return false
		}
		switch x := m.(type) {
		case *pg_query.Node, *pg_query.A_Expr, *pg_query.BoolExpr, *pg_query.NullTest, *pg_query.BooleanTest,
			*pg_query.TypeCast, *pg_query.TypeName, *pg_query.A_Const, *pg_query.String, *pg_query.Integer,
			*pg_query.Float, *pg_query.Boolean, *pg_query.List:
		case *pg_query.ColumnRef:
			r := placeColumn(x, top, plain, columns)
			if r == nil {
				ok = false
				return false
			}
			claim(r)
		default:
			ok = false
			return false
		}
		return true
	})
	return owner, ok
}

// placeColumn finds the reference of the top-level FROM a column
// reference names, or nil.
func placeColumn(cr *pg_query.ColumnRef, top []*tableRef, plain bool, columns map[TableName][]string) *tableRef {
	switch len(cr.Fields) {
	case 1:
		if !plain {
			return nil
		}
		name := cr.Fields[0].GetString_().GetSval()
		var found *tableRef
		for _, r := range top {
			if contains(columns[r.name], name) {
				if found != nil {
					return nil
				}
				found = r
			}
		}
		return found
	case 2:
		qual := cr.Fields[0].GetString_().GetSval()
		name := cr.Fields[1].GetString_().GetSval()
		var found *tableRef
		for _, r := range top {
			if r.qualifier() == qual {
				if found != nil {
					return nil
				}
				found = r
			}
		}
		if found == nil || !contains(columns[found.name], name) {
			return nil
		}
		return found
	}
	return nil
}
