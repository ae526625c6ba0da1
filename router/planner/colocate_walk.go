package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/tesseradb/tessera/topo"
	"google.golang.org/protobuf/proto"
)

// The walk of colocate.go: scopes, FROM items, joins, subqueries and the
// conjuncts that restrict and colocate sharded table occurrences.

// selectScope analyses a SELECT under outer and returns its anchors.
func (a *colocation) selectScope(outer *scope, s *pg_query.SelectStmt) []*occurrence {
	if s == nil {
		return nil
	}
	a.with(outer, s.WithClause)
	if s.Op != pg_query.SetOperation_SETOP_NONE {
		// Each row of a set operation comes from either side: no anchor.
		a.selectScope(outer, s.Larg)
		a.selectScope(outer, s.Rarg)
		return nil
	}
	sc := &scope{outer: outer}
	a.scopes[s] = sc
	var anchors []*occurrence
	for _, item := range s.FromClause {
		anchors = append(anchors, a.fromItem(sc, item)...)
	}
	for _, n := range [][]*pg_query.Node{s.TargetList, s.GroupClause, s.WindowClause, s.SortClause, s.DistinctClause, s.ValuesLists,
		{s.WhereClause, s.HavingClause, s.LimitCount, s.LimitOffset}} {
		a.subqueries(sc, n...)
	}
	return append(anchors, a.filter(sc, s.WhereClause, nil)...)
}

// dmlScope analyses an UPDATE or DELETE: its target anchors it.
func (a *colocation) dmlScope(outer *scope, target *pg_query.RangeVar, from []*pg_query.Node, where *pg_query.Node, exprs ...[]*pg_query.Node) []*occurrence {
	sc := &scope{outer: outer}
	var anchors []*occurrence
	anchors = append(anchors, a.fromItem(sc, &pg_query.Node{Node: &pg_query.Node_RangeVar{RangeVar: target}})...)
	for _, item := range from {
		a.fromItem(sc, item)
	}
	for _, n := range exprs {
		a.subqueries(sc, n...)
	}
	a.subqueries(sc, where)
	a.filter(sc, where, nil)
	return anchors
}

// with analyses WITH queries; a query referenced once anchors the FROM
// item that references it.
func (a *colocation) with(outer *scope, w *pg_query.WithClause) {
	for _, n := range w.GetCtes() {
		cte := n.GetCommonTableExpr()
		var anchors []*occurrence
		switch q := cte.GetCtequery().GetNode().(type) {
		case *pg_query.Node_SelectStmt:
			anchors = a.selectScope(outer, q.SelectStmt)
		case *pg_query.Node_UpdateStmt:
			u := q.UpdateStmt
			a.refuseReferenceWrite(u.Relation)
			anchors = a.dmlScope(outer, u.Relation, u.FromClause, u.WhereClause, u.TargetList, u.ReturningList)
		case *pg_query.Node_DeleteStmt:
			d := q.DeleteStmt
			a.refuseReferenceWrite(d.Relation)
			anchors = a.dmlScope(outer, d.Relation, d.UsingClause, d.WhereClause, d.ReturningList)
		case *pg_query.Node_InsertStmt:
			a.refuseWrite(q.InsertStmt.Relation, "INSERT")
		case *pg_query.Node_MergeStmt:
			a.refuseWrite(q.MergeStmt.Relation, "MERGE")
		}
		if w.Recursive || a.cteUses[cte.Ctename] != 1 {
			anchors = nil
		}
		a.ctes[cte.Ctename] = anchors
	}
}

// refuseWrite refuses an INSERT or MERGE in a WITH query into a table of
// a sharded group or a reference table: it would run on every shard the
// statement reaches, where each row belongs on one (or on every copy).
func (a *colocation) refuseWrite(rv *pg_query.RangeVar, what string) {
	if r := a.refs[rv]; r != nil && (sharded(r) || r.place.IsReference()) && a.err == nil {
		a.err = unsupported("%s into %s in a WITH query is not supported yet", what, r.name)
	}
}

// refuseReferenceWrite refuses an UPDATE or DELETE in a WITH query of a
// reference table, whose copies must all change alike.
func (a *colocation) refuseReferenceWrite(rv *pg_query.RangeVar) {
	if r := a.refs[rv]; r != nil && !r.catalog && r.place.IsReference() && a.err == nil {
		a.err = unsupported("a write to reference table %s in a WITH query is not supported yet", r.name)
	}
}

// fromItem registers a FROM item's names in sc, analyses its joins and
// subqueries, and returns its anchors.
func (a *colocation) fromItem(sc *scope, n *pg_query.Node) []*occurrence {
	switch x := n.GetNode().(type) {
	case *pg_query.Node_RangeVar:
		rv := x.RangeVar
		r := a.refs[rv]
		item := nameItem{ref: r, as: rv.GetAlias().GetAliasname()}
		if r == nil { // a WITH query
			if item.as == "" {
				item.as = rv.Relname
			}
			sc.items = append(sc.items, item)
			return a.ctes[rv.Relname]
		}
		if sharded(r) {
			item.occ = a.occurrence(r)
		}
		sc.items = append(sc.items, item)
		if item.occ != nil {
			return []*occurrence{item.occ}
		}
	case *pg_query.Node_JoinExpr:
		return a.join(sc, x.JoinExpr)
	case *pg_query.Node_RangeSubselect:
		sc.items = append(sc.items, nameItem{as: x.RangeSubselect.GetAlias().GetAliasname()})
		// A subquery in FROM sees the scope's items (LATERAL).
		return a.selectScope(sc, x.RangeSubselect.Subquery.GetSelectStmt())
	case *pg_query.Node_RangeTableSample:
		a.subqueries(sc, x.RangeTableSample.Args...)
		return a.fromItem(sc, x.RangeTableSample.Relation)
	case *pg_query.Node_RangeFunction:
		sc.items = append(sc.items, nameItem{as: x.RangeFunction.GetAlias().GetAliasname()})
		a.subqueries(sc, x.RangeFunction.Functions...)
	default:
		sc.items = append(sc.items, nameItem{})
		a.subqueries(sc, n)
	}
	return nil
}

// join analyses a JoinExpr. Rows of an outer join's nullable side that
// match nothing do not matter, so its ON restricts that side; the
// preserved side's rows all matter.
func (a *colocation) join(sc *scope, j *pg_query.JoinExpr) []*occurrence {
	before := len(sc.items)
	left := a.fromItem(sc, j.Larg)
	mid := len(sc.items)
	right := a.fromItem(sc, j.Rarg)
	leftItems, rightItems := sc.items[before:mid], sc.items[mid:]
	a.subqueries(sc, j.Quals)
	var nullable []nameItem
	var anchors []*occurrence
	switch j.Jointype {
	case pg_query.JoinType_JOIN_INNER:
		anchors = append(left, right...)
	case pg_query.JoinType_JOIN_LEFT:
		nullable, anchors = rightItems, left
	case pg_query.JoinType_JOIN_RIGHT:
		nullable, anchors = leftItems, right
	default: // FULL: every row of both sides matters
		if j.Alias != nil {
			sc.items = append(sc.items, nameItem{as: j.Alias.Aliasname})
		}
		return nil
	}
	if !j.IsNatural {
		a.filter(sc, j.Quals, nullable)
		for _, u := range j.UsingClause {
			col := u.GetString_().GetSval()
			l, r := usingOccurrence(j.Larg, col, sc), usingOccurrence(j.Rarg, col, sc)
			a.equal(sc, l, r, nullable)
		}
	}
	if j.Alias != nil {
		sc.items = append(sc.items, nameItem{as: j.Alias.Aliasname})
	}
	return anchors
}

// usingOccurrence finds the sharded occurrence whose shard-key column
// col of a JOIN ... USING side names, or nil.
func usingOccurrence(n *pg_query.Node, col string, sc *scope) *occurrence {
	switch x := n.GetNode().(type) {
	case *pg_query.Node_RangeVar:
		for _, it := range sc.items {
			if it.ref != nil && it.ref.rv == x.RangeVar && it.occ != nil && it.ref.place.ShardColumn() == col {
				return it.occ
			}
		}
	case *pg_query.Node_JoinExpr:
		j := x.JoinExpr
		for _, u := range j.UsingClause {
			if u.GetString_().GetSval() != col {
				continue
			}
			// The merged column is the left side's, the right's for a
			// RIGHT JOIN, either for an inner join; FULL: neither.
			switch j.Jointype {
			case pg_query.JoinType_JOIN_INNER, pg_query.JoinType_JOIN_LEFT:
				return usingOccurrence(j.Larg, col, sc)
			case pg_query.JoinType_JOIN_RIGHT:
				return usingOccurrence(j.Rarg, col, sc)
			}
			return nil
		}
		if j.IsNatural || j.Alias != nil {
			return nil
		}
		l, r := usingOccurrence(j.Larg, col, sc), usingOccurrence(j.Rarg, col, sc)
		if l == nil {
			return r
		}
		if r == nil {
			return l
		}
		return nil // Postgres finds it ambiguous
	}
	return nil
}

// subqueries analyses the subqueries of expressions, each in a scope under
// sc.
func (a *colocation) subqueries(sc *scope, nodes ...*pg_query.Node) {
	for _, n := range nodes {
		if n == nil {
			continue
		}
		walk(n.ProtoReflect(), func(m proto.Message) bool {
			if sl, ok := m.(*pg_query.SubLink); ok {
				a.subqueries(sc, sl.Testexpr)
				a.selectScope(sc, sl.Subselect.GetSelectStmt())
				return false
			}
			return true
		})
	}
}

// filter reads the conjuncts of a WHERE clause or a join's ON: key
// predicates restrict occurrences of sc, equal shard keys join them. With
// nullable set (an outer join's ON), only occurrences among its items are
// restricted. It returns the occurrences a WHERE's conjuncts require
// non-null: = is strict.
func (a *colocation) filter(sc *scope, where *pg_query.Node, nullable []nameItem) []*occurrence {
	var strict []*occurrence
	for _, n := range conjuncts(where, nil) {
		if sl := n.GetSubLink(); sl != nil {
			a.inSubquery(sc, sl)
			continue
		}
		ax := n.GetAExpr()
		if ax == nil || !isEquals(ax.Name) {
			continue
		}
		l, r := ax.Lexpr.GetColumnRef(), ax.Rexpr.GetColumnRef()
		if ax.Kind == pg_query.A_Expr_Kind_AEXPR_OP && l != nil && r != nil {
			x, y := a.keyColumn(sc, l), a.keyColumn(sc, r)
			a.equal(sc, x, y, nullable)
			strict = appendOwn(strict, sc, x, y)
		}
		p, ref, err := a.c.keyOf(ax, func(cr *pg_query.ColumnRef) (*tableRef, string, *topo.ShardIndex) {
			return a.ownColumn(sc, cr, nullable)
		})
		if err != nil && a.err == nil {
			a.err = err
		}
		if p == nil {
			continue
		}
		o := a.byRV[ref.rv]
		if p.better(o.pred) {
			o.pred = p
		}
		strict = append(strict, o)
	}
	if nullable != nil {
		return nil
	}
	return strict
}

func appendOwn(out []*occurrence, sc *scope, occs ...*occurrence) []*occurrence {
	for _, o := range occs {
		if o != nil && owns(sc, o) {
			out = append(out, o)
		}
	}
	return out
}

func owns(sc *scope, o *occurrence) bool {
	for _, it := range sc.items {
		if it.occ == o {
			return true
		}
	}
	return false
}

func among(items []nameItem, o *occurrence) bool {
	for _, it := range items {
		if it.occ == o {
			return true
		}
	}
	return false
}

// equal records x.k = y.k: each restricts the other where the other's rows
// are filtered by it (its own scope's occurrence, on the nullable side if
// there is one).
func (a *colocation) equal(sc *scope, x, y *occurrence, nullable []nameItem) {
	if x == nil || y == nil || x == y || !a.routeAlike(x, y) {
		return
	}
	restrictable := func(o *occurrence) bool {
		return owns(sc, o) && (nullable == nil || among(nullable, o))
	}
	if restrictable(y) {
		x.next = append(x.next, y)
	}
	if restrictable(x) {
		y.next = append(y.next, x)
	}
}

// inSubquery records x.k IN (SELECT y.k FROM y ...) (or = ANY): the rows
// of y that matter have x's key, if the subquery's answer is its rows'
// keys (no LIMIT, aggregate or grouping picks among them).
func (a *colocation) inSubquery(sc *scope, sl *pg_query.SubLink) {
	s := sl.Subselect.GetSelectStmt()
	if sl.SubLinkType != pg_query.SubLinkType_ANY_SUBLINK || len(sl.OperName) > 0 && !isEquals(sl.OperName) ||
		s == nil || s.Op != pg_query.SetOperation_SETOP_NONE || len(s.TargetList) != 1 || s.LimitCount != nil || s.LimitOffset != nil ||
		len(s.GroupClause) > 0 || s.HavingClause != nil || len(s.WindowClause) > 0 || len(s.DistinctClause) > 0 {
		return
	}
	tc, ok := sl.Testexpr.GetColumnRef(), a.scopes[s] != nil
	out := s.TargetList[0].GetResTarget().GetVal().GetColumnRef()
	if tc == nil || out == nil || !ok {
		return
	}
	x, y := a.keyColumn(sc, tc), a.keyColumn(a.scopes[s], out)
	if x != nil && y != nil && owns(a.scopes[s], y) && a.routeAlike(x, y) {
		x.next = append(x.next, y)
	}
}

// routeAlike reports shard keys whose equal values land on one shard: the
// same group, indexes with the same sharding function (one index, or two
// naming different columns, as orders' o_orderkey and lineitem's
// l_orderkey: equal values have equal routing keys either way), and
// types that encode alike.
func (a *colocation) routeAlike(x, y *occurrence) bool {
	px, py := x.ref.place, y.ref.place
	if px.Group != py.Group || px.Index == nil || py.Index == nil || px.Index.Func != py.Index.Func {
		return false
	}
	tx, err := a.c.columnType(x.ref.name, px.ShardColumn())
	if err == nil {
		var ty = tx
		ty, err = a.c.columnType(y.ref.name, py.ShardColumn())
		if err == nil {
			return sameFamily(tx, ty)
		}
	}
	if a.err == nil {
		a.err = err
	}
	return false
}

// keyColumn resolves a column reference to the occurrence whose placement
// shard-key column it names. A qualified name is looked up from sc
// outwards, the nearest item of that name deciding; an unqualified one
// only among sc's own items (it might be any table's column further out).
func (a *colocation) keyColumn(sc *scope, cr *pg_query.ColumnRef) *occurrence {
	parts, ok := columnParts(cr)
	if !ok {
		return nil
	}
	col, q := parts[len(parts)-1], parts[:len(parts)-1]
	for s := sc; s != nil; s = s.outer {
		for _, it := range s.items {
			if len(q) == 0 {
				if it.occ != nil && it.ref.place.ShardColumn() == col {
					return it.occ
				}
				continue
			}
			if it.ref != nil && qualifies(q, it.ref) || it.ref == nil && len(q) == 1 && it.as == q[0] {
				if it.occ != nil && it.ref.place.ShardColumn() == col {
					return it.occ
				}
				return nil
			}
		}
		if len(q) == 0 {
			return nil
		}
	}
	return nil
}

// ownColumn resolves a column of a key predicate: a shard-key or alternate
// column of one of sc's own occurrences (among nullable, if set).
func (a *colocation) ownColumn(sc *scope, cr *pg_query.ColumnRef, nullable []nameItem) (*tableRef, string, *topo.ShardIndex) {
	items := sc.items
	if nullable != nil {
		items = nullable
	}
	var tables []*tableRef
	for _, it := range items {
		if it.occ != nil {
			tables = append(tables, it.ref)
		}
	}
	// A qualifier naming another item of the scope is not one of these.
	if parts, ok := columnParts(cr); ok && len(parts) == 2 {
		for _, it := range sc.items {
			if it.ref == nil && it.as == parts[0] {
				return nil, "", nil
			}
		}
	}
	return columnIndex(cr, tables)
}

func columnParts(cr *pg_query.ColumnRef) ([]string, bool) {
	parts := make([]string, 0, len(cr.Fields))
	for _, f := range cr.Fields {
		s := f.GetString_()
		if s == nil {
			return nil, false
		}
		parts = append(parts, s.Sval)
	}
	return parts, len(parts) > 0
}
