package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// INSERT ... SELECT into a sharded table runs on the shards themselves
// when every row the SELECT makes on a shard belongs there: the SELECT
// reads one sharded table of the target's group, row by row (no
// aggregate, DISTINCT, LIMIT, window or set operation, which would
// combine rows of several shards), beside reference tables held on every
// shard of the group, and the value it gives the target's shard-key
// column is the source's own shard-key column, routed by the same
// function (as the colocation of two tables: colocate_walk.go). Each
// shard then inserts its own rows into its own part of the target, at
// once, in one transaction across the shards (atomic commit). Anything
// else is refused (0A000): rows computed by the router and split by key
// are planned.

// insertSelect plans INSERT ... SELECT into target, a sharded table; the
// statement's sharded tables (target's group) are shardedRefs.
func (c *planCtx) insertSelect(st *Statement, q *query, target *tableRef, shardedRefs []*tableRef, f *facts) {
	refuse := func(why string) {
		st.Err = unsupported("INSERT ... SELECT into sharded table %s %s is not supported yet", target.name, why)
	}
	var source *tableRef
	for _, r := range shardedRefs {
		if r == target {
			continue
		}
		if source != nil {
			refuse("reading several sharded tables")
			return
		}
		source = r
	}
	if source == nil {
		refuse("from a SELECT that reads no sharded table")
		return
	}
	if f.crossShard != "" {
		refuse("whose SELECT combines rows of several shards (" + f.crossShard + ")")
		return
	}
	ins := q.insert
	sel := ins.SelectStmt.GetSelectStmt()
	if sel == nil || sel.Op != pg_query.SetOperation_SETOP_NONE || len(sel.DistinctClause) > 0 || len(sel.GroupClause) > 0 ||
		sel.HavingClause != nil || sel.LimitCount != nil || sel.LimitOffset != nil || len(sel.WindowClause) > 0 || sel.WithClause != nil {
		refuse("whose SELECT combines rows of several shards")
		return
	}
	column := target.place.ShardColumn()
	cols := make([]string, len(ins.Cols))
	for i, n := range ins.Cols {
		cols[i] = n.GetResTarget().GetName()
	}
	if len(cols) == 0 {
		names, err := c.columnNames(target.name)
		if err != nil {
			st.Err = err
			return
		}
		cols = names
	}
	pos := -1
	for i, col := range cols {
		if col == column {
			pos = i
		}
	}
	if pos < 0 {
		refuse("leaving its shard key column " + column + " to its default")
		return
	}
	if !c.sourceKeyAt(sel, pos, source) {
		refuse("whose value for its shard key column " + column + " is not the shard key column of " + source.name.String())
		return
	}
	sp, tp := source.place, target.place
	if sp.Group != tp.Group || sp.Index == nil || sp.Index.Func != tp.Index.Func {
		refuse("from " + source.name.String() + ", sharded by another function")
		return
	}
	tt, err := c.columnType(target.name, column)
	if err != nil {
		st.Err = err
		return
	}
	ts, err := c.columnType(source.name, sp.ShardColumn())
	if err != nil {
		st.Err = err
		return
	}
	if !sameFamily(tt, ts) {
		refuse("from a shard key of another type")
		return
	}
	if err := checkSets(q.sets, target); err != nil {
		st.Err = err
		return
	}
	if err := c.checkArbiter(ins.OnConflictClause, target); err != nil {
		st.Err = err
		return
	}
	st.Route = Scatter // Group and Targets: the group's shards (place)
}

// sourceKeyAt reports whether the SELECT's output column pos is source's
// shard-key column: a reference to it, or * over source alone.
func (c *planCtx) sourceKeyAt(sel *pg_query.SelectStmt, pos int, source *tableRef) bool {
	key := source.place.ShardColumn()
	if len(sel.TargetList) == 1 {
		if cr := sel.TargetList[0].GetResTarget().GetVal().GetColumnRef(); cr != nil && len(cr.Fields) > 0 && cr.Fields[len(cr.Fields)-1].GetAStar() != nil {
			if len(sel.FromClause) != 1 || sel.FromClause[0].GetRangeVar() == nil {
				return false // * over a join: columns of several tables
			}
			names, err := c.columnNames(source.name)
			return err == nil && pos < len(names) && names[pos] == key
		}
	}
	if pos >= len(sel.TargetList) {
		return false
	}
	for _, t := range sel.TargetList {
		if cr := t.GetResTarget().GetVal().GetColumnRef(); cr != nil && cr.Fields[len(cr.Fields)-1].GetAStar() != nil {
			return false // positions shifted by a *
		}
	}
	cr := sel.TargetList[pos].GetResTarget().GetVal().GetColumnRef()
	if cr == nil {
		return false
	}
	r, col, ix := columnIndex(cr, []*tableRef{source})
	return r == source && col == key && ix == source.place.Index
}
