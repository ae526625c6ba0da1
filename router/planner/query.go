package planner

import pg_query "github.com/pganalyze/pg_query_go/v6"

// query is a SELECT, INSERT, UPDATE, DELETE, MERGE or COPY as placement
// sees it.
type query struct {
	kind   Kind
	read   bool                 // a read: the cross-shard restrictions apply
	from   []*pg_query.RangeVar // the tables of a read's own FROM
	target *pg_query.RangeVar   // the table written
	insert *pg_query.InsertStmt
	sets   []*pg_query.Node     // SET targets of UPDATE and ON CONFLICT DO UPDATE
	sel    *pg_query.SelectStmt // a SELECT's own statement
	update *pg_query.UpdateStmt
	delete *pg_query.DeleteStmt
	copy   *pg_query.CopyStmt // COPY ... FROM's own statement
}

func (c *planCtx) planQuery(st *Statement, q *query, f *facts) {
	refs, err := c.resolveTables(f, q.target)
	for _, r := range refs {
		if err == nil && !r.catalog {
			err = c.checkView(r) // views.go
		}
	}
	if err != nil {
		st.Err = err
		return
	}
	st.Tables = tableNames(refs)
	c.place(st, q, refs, f)
	if q.read {
		c.planGather(st, q, refs, f) // gather.go
	}
	c.checkFunctions(st, f) // functions.go
	for _, r := range refs {
		if r.target {
			c.checkTriggers(st, r) // functions.go
			c.checkRules(st, r)    // views.go
		}
	}
}

// place chooses the route of a query from the placements of its tables.
// Catalogs are on every shard and never constrain it. Reference tables are
// on every shard of their groups and join with anything there. Otherwise
// every table must live on one shard, or all in one sharded group, where
// the statement runs on the shards its tables' rows are proven to be on
// (colocate.go).
func (c *planCtx) place(st *Statement, q *query, refs []*tableRef, f *facts) {
	var shardedRefs, fixed, reference []*tableRef
	var target *tableRef
	for _, r := range refs {
		if r.target {
			target = r
		}
		switch {
		case r.catalog:
		case r.place.IsReference():
			reference = append(reference, r)
		case r.place.Group.SingleShard():
			fixed = append(fixed, r)
		default:
			shardedRefs = append(shardedRefs, r)
		}
	}
	if f.sequenceCall && (len(shardedRefs) > 0 || target != nil && !target.catalog && target.place.IsReference()) {
		st.Err = unsupported(sequencesElsewhere)
		return
	}
	if target != nil && !target.catalog && target.place.IsReference() {
		c.placeReferenceWrite(st, q, target, refs)
		return
	}
	if len(shardedRefs) == 0 {
		c.placeFixed(st, fixed, reference)
		if f.sequenceCall && st.Err == nil && st.Targets[0] != c.top.AuthoritativeShard() {
			st.Err = unsupported(sequencesElsewhere)
		}
		return
	}
	g := shardedRefs[0].place.Group
	for _, r := range shardedRefs[1:] {
		if r.place.Group != g {
			st.Err = unsupported("a join across shard groups %s and %s is not supported yet (%s, %s)",
				g.UID, r.place.Group.UID, shardedRefs[0].name, r.name)
			return
		}
	}
	if len(fixed) > 0 {
		st.Err = unsupported("a join across shard groups %s and %s is not supported yet (%s, %s)",
			g.UID, fixed[0].place.Group.UID, shardedRefs[0].name, fixed[0].name)
		return
	}
	st.Group, st.Targets = g.UID, g.Shards()
	for _, r := range reference {
		if missing := notHeld(r, st.Targets); missing != "" {
			st.Err = unsupported("reference table %s has no copy on shard %s of group %s", r.name, missing, g.UID)
			return
		}
	}
	switch {
	case q.kind == Insert && q.insert.SelectStmt != nil && len(q.insert.SelectStmt.GetSelectStmt().GetValuesLists()) == 0:
		c.insertSelect(st, q, target, shardedRefs, f) // insertselect.go
		return
	case q.kind == Insert:
		for _, r := range shardedRefs {
			if r != target {
				st.Err = unsupported("an INSERT into sharded table %s that reads sharded table %s is not supported yet", target.name, r.name)
				return
			}
		}
		c.insertKeys(st, q, target)
		return
	case q.kind == Merge:
		st.Err = unsupported("MERGE into sharded table %s is not supported yet", target.name)
		return
	case q.kind == Copy && target != nil:
		c.copyInto(st, q.copy, target)
		return
	case q.kind == Update && setsShardKey(q.sets, target):
		if c.keyMove(st, q, target); st.Err != nil { // keymove.go
			return
		}
	case target != nil:
		if err := checkSets(q.sets, target); err != nil {
			st.Err = err
			return
		}
	}
	colocated, err := c.colocate(st, q, refs, shardedRefs, f)
	if err != nil {
		st.Err = err
		return
	}
	if !q.read {
		return
	}
	if st.Route == Scatter || colocated {
		if err := c.checkCalls(f); err != nil {
			st.Err = err
			return
		}
	}
	if f.crossShard == "" || c.mergeable(st, q, f, refs, shardedRefs) {
		return
	}
	switch {
	case st.Route == Scatter:
		st.Err = crossShard(f.crossShard, everyShard(g.UID))
	case colocated:
		st.multiShard = crossShard(f.crossShard, severalShards(g.UID))
	}
}

// sequencesElsewhere refuses a statement that would call sequence
// functions on a shard other than the authoritative one, whose copy of the
// sequence gives values the authoritative shard's also gives.
const sequencesElsewhere = "sequence functions (nextval, currval, setval, lastval) in a statement on tables outside the authoritative shard are not supported yet: sequences live on the authoritative shard"

// placeFixed routes a query whose tables live on single shards (or are
// reference tables, or none at all) to the one shard that has them all.
func (c *planCtx) placeFixed(st *Statement, fixed, reference []*tableRef) {
	shard := ""
	for _, r := range fixed {
		s := r.place.Group.KeyRanges[0].ShardUID
		if shard != "" && s != shard {
			st.Err = unsupported("a join across shard groups %s and %s is not supported yet (%s, %s)",
				fixed[0].place.Group.UID, r.place.Group.UID, fixed[0].name, r.name)
			return
		}
		shard = s
	}
	if shard == "" {
		// Reference tables alone are read from the authoritative shard
		// if it has them, else from the first shard that has them all.
		shard = c.top.AuthoritativeShard()
		if len(reference) > 0 && notHeld(reference[0], []string{shard}) != "" {
			shard = referenceShards(reference[0])[0]
		}
	}
	for _, r := range reference {
		if notHeld(r, []string{shard}) != "" {
			st.Err = unsupported("reference table %s has no copy on shard %s, where the statement's other tables are", r.name, shard)
			return
		}
	}
	st.Route, st.Targets = Authoritative, []string{shard}
}

// placeReferenceWrite sends a write to a reference table to every copy.
func (c *planCtx) placeReferenceWrite(st *Statement, q *query, target *tableRef, refs []*tableRef) {
	if q.kind == Copy {
		st.Err = unsupported("COPY into reference table %s is not supported yet", target.name)
		return
	}
	shards := referenceShards(target)
	for _, r := range refs {
		switch {
		case r == target || r.catalog:
		case !r.place.IsReference():
			st.Err = unsupported("a write to reference table %s that reads table %s is not supported yet", target.name, r.name)
			return
		case notHeld(r, shards) != "":
			st.Err = unsupported("reference table %s has no copy on every shard of reference table %s", r.name, target.name)
			return
		}
	}
	st.Route, st.Targets = Everywhere, shards
}

// referenceShards lists the shards holding a copy of a reference table, in
// the order of its groups.
func referenceShards(r *tableRef) []string {
	var out []string
	for _, g := range r.place.ReferenceGroups {
		out = appendNew(out, g.Shards()...)
	}
	return out
}

// notHeld returns the first of shards that has no copy of reference table
// r, or "".
func notHeld(r *tableRef, shards []string) string {
	have := referenceShards(r)
	for _, s := range shards {
		if !contains(have, s) {
			return s
		}
	}
	return ""
}

// checkSets refuses an UPDATE (or ON CONFLICT DO UPDATE) that changes a
// shard key of a sharded table: the row would have to move to another
// shard.
func checkSets(sets []*pg_query.Node, target *tableRef) error {
	p := target.place
	for _, n := range sets {
		col := n.GetResTarget().GetName()
		switch {
		case col == "":
		case col == p.ShardColumn():
			return unsupported("UPDATE of shard key column %s of %s is not supported yet", col, target.name)
		case p.Alternate(col) != nil:
			return unsupported("UPDATE of alternate shard key column %s of %s is not supported yet", col, target.name)
		}
	}
	return nil
}

// tableShards lists the shards holding any of refs (every shard of their
// groups, the copies of reference tables), in order of appearance.
func tableShards(refs []*tableRef) []string {
	var out []string
	for _, r := range refs {
		switch {
		case r.catalog:
		case r.place.IsReference():
			out = appendNew(out, referenceShards(r)...)
		default:
			out = appendNew(out, r.place.Group.Shards()...)
		}
	}
	return out
}

// appendNew appends those of items that are not in out yet.
func appendNew(out []string, items ...string) []string {
	for _, s := range items {
		if !contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// mergeable sets how the router combines the shards' answers to a read
// whose rows must be combined, if it can, and reports whether it can.
func (c *planCtx) mergeable(st *Statement, q *query, f *facts, refs, sharded []*tableRef) bool {
	if lim, ok := c.limitOnly(q, f); ok {
		st.Merge, st.Limit = MergeLimit, lim
		return true
	}
	var scope *mergeScope
	switch {
	case len(sharded) == 1 && len(q.from) == 1:
		scope = singleScope(sharded[0])
	case len(sharded) >= 1:
		// A join the shards answer whole (the caller proved it
		// colocated): merged as one table's rows when its names allow.
		scope = c.joinScope(q.from, refs)
	}
	if p, ok := c.enginePlan(q, f, scope); ok {
		st.Merge, st.Engine = MergeEngine, p
		return true
	}
	if scope != nil && !scope.single() {
		// The counts of several tables need no names.
		if p, ok := c.enginePlan(q, f, nil); ok {
			st.Merge, st.Engine = MergeEngine, p
			return true
		}
	}
	return false
}
