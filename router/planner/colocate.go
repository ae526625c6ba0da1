package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// A statement over tables of one sharded group runs on one shard only if
// every sharded table it reads is restricted to that shard, and on several
// only if each row it answers comes from one shard alone. Nothing is
// assumed of joins: the planner proves both from the statement.
//
// Each occurrence of a sharded table in the statement is a node. An edge
// x -> y says that the rows of y that matter pair only with rows of x of
// the same shard key, so live on the same shard: y.k = x.k among the
// conjuncts of a WHERE clause or an inner join's ON (both ways), of an
// outer join's ON (from the preserved side to the nullable one), of a
// subquery's WHERE correlated with x (into the subquery), and x.k IN
// (SELECT y.k FROM y ...) as a conjunct. Both keys must be the shard-key
// columns of tables routed by the same index, with types that route
// alike. A key predicate (k = v, k IN (...)) among such conjuncts
// restricts its occurrence to the shards of its values, and so every
// occurrence reachable from it.
//
// An anchor is an occurrence with a row in every row the statement
// answers (or writes): a sharded table of its FROM outside the nullable
// side of an outer join, or one a WHERE conjunct requires non-null.
//
//   - If every occurrence is reachable from an anchor, each answer row and
//     everything it was made of live on that anchor's row's shard: the
//     statement may scatter (the shards' rows are disjoint), or route by a
//     key predicate that restricts the anchor.
//   - Otherwise it may run on one shard only: every occurrence must be
//     restricted by a key predicate, and all those predicates' values
//     must reach one shard (checked at execution: Key.Separate).

// occurrence is one reference to a sharded table in a statement.
type occurrence struct {
	ref  *tableRef
	pred *keyPredicate // its best own key predicate, or nil
	next []*occurrence // edges: occurrences restricted to this one's key
}

// nameItem is a name a scope's columns may be qualified by: a table (occ
// set when sharded) or another FROM item (a subquery, a function, a CTE).
type nameItem struct {
	ref *tableRef // nil for other items
	as  string
	occ *occurrence
}

type scope struct {
	outer *scope
	items []nameItem
}

// colocation analyses one statement.
type colocation struct {
	c       *planCtx
	refs    map[*pg_query.RangeVar]*tableRef
	byRV    map[*pg_query.RangeVar]*occurrence
	occs    []*occurrence
	scopes  map[*pg_query.SelectStmt]*scope
	ctes    map[string][]*occurrence // anchors of WITH queries referenced once
	cteUses map[string]int
	err     error // a Schema error, or a write the planner refuses
}

func (c *planCtx) newColocation(refs []*tableRef, f *facts) *colocation {
	a := &colocation{c: c, refs: map[*pg_query.RangeVar]*tableRef{}, byRV: map[*pg_query.RangeVar]*occurrence{},
		scopes: map[*pg_query.SelectStmt]*scope{}, ctes: map[string][]*occurrence{}, cteUses: map[string]int{}}
	for _, r := range refs {
		a.refs[r.rv] = r
	}
	for _, rv := range f.ranges {
		if rv.Schemaname == "" && f.ctes[rv.Relname] {
			a.cteUses[rv.Relname]++
		}
	}
	return a
}

// sharded reports a table of a sharded group (not a catalog, reference
// table or single-shard group's table).
func sharded(r *tableRef) bool {
	return r != nil && !r.catalog && !r.place.IsReference() && !r.place.Group.SingleShard()
}

func (a *colocation) occurrence(r *tableRef) *occurrence {
	if o := a.byRV[r.rv]; o != nil {
		return o
	}
	o := &occurrence{ref: r}
	a.byRV[r.rv] = o
	a.occs = append(a.occs, o)
	return o
}

// colocate makes st a Shard route by a key predicate or a Scatter over
// every shard of the group, whichever the statement's sharded tables are
// proven to allow, or fails. colocated reports a statement
// whose answer rows each come from one shard, so that several shards may
// answer it; otherwise it is routed to one shard only.
func (c *planCtx) colocate(st *Statement, q *query, refs, shardedRefs []*tableRef, f *facts) (colocated bool, err error) {
	a := c.newColocation(refs, f)
	var anchors []*occurrence
	switch {
	case q.sel != nil:
		anchors = a.selectScope(nil, q.sel)
	case q.update != nil:
		u := q.update
		a.with(nil, u.WithClause)
		anchors = a.dmlScope(nil, u.Relation, u.FromClause, u.WhereClause, u.TargetList, u.ReturningList)
	case q.delete != nil:
		d := q.delete
		a.with(nil, d.WithClause)
		anchors = a.dmlScope(nil, d.Relation, d.UsingClause, d.WhereClause, d.ReturningList)
	default: // COPY table TO
		for _, r := range shardedRefs {
			anchors = append(anchors, a.occurrence(r))
		}
	}
	if a.err != nil {
		return false, a.err
	}
	for _, r := range shardedRefs {
		a.occurrence(r) // one the analysis did not meet is restricted by nothing
	}
	for _, root := range anchors {
		if len(reach(root)) < len(a.occs) {
			continue
		}
		// Every anchor is reachable from root, so each answer row's
		// anchors share a shard: a predicate restricting any restricts it.
		var by *occurrence
		for _, o := range a.occs {
			if o.pred != nil && o.pred.better(by.predicate()) && reachesAny(o, anchors) {
				by = o
			}
		}
		if by == nil {
			st.Route = Scatter
		} else {
			st.Route, st.Placement, st.Keys = Shard, by.ref.place, by.pred.keys
		}
		return true, nil
	}
	// Not colocated: one shard must hold every row that matters.
	covered := map[*occurrence]bool{}
	var keys []Key
	for _, o := range a.occs {
		if covered[o] {
			continue
		}
		var by *occurrence
		for _, p := range a.occs {
			if p.pred != nil && p.pred.better(by.predicate()) && reach(p)[o] {
				by = p
			}
		}
		if by == nil {
			return false, crossShard(joinNotOnShardKey, notRestricted(o.ref.name, st.Group))
		}
		for x := range reach(by) {
			covered[x] = true
		}
		if st.Route != Shard {
			st.Route, st.Placement = Shard, by.ref.place
		} else {
			for i := range by.pred.keys {
				by.pred.keys[i].Separate = true
			}
		}
		keys = append(keys, by.pred.keys...)
	}
	st.Keys = keys
	st.multiShard = crossShard(joinNotOnShardKey, severalShards(st.Group))
	return false, nil
}

// reach lists the occurrences reachable from o, o included.
func reach(o *occurrence) map[*occurrence]bool {
	seen := map[*occurrence]bool{o: true}
	stack := []*occurrence{o}
	for len(stack) > 0 {
		x := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, y := range x.next {
			if !seen[y] {
				seen[y] = true
				stack = append(stack, y)
			}
		}
	}
	return seen
}

func reachesAny(o *occurrence, targets []*occurrence) bool {
	r := reach(o)
	for _, t := range targets {
		if r[t] {
			return true
		}
	}
	return false
}

// predicate is o's key predicate; nil for no occurrence.
func (o *occurrence) predicate() *keyPredicate {
	if o == nil {
		return nil
	}
	return o.pred
}
