package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/tesseradb/tessera/topo"
)

// A view is not in the topology: the planner places it as an unlisted
// table of its schema, usually on the authoritative shard. DDL made it on
// every shard, where it reads that shard's rows only, so a view over a
// table of another shard group answers wrongly wherever it is read: from
// the authoritative shard, only that shard's part of a sharded table; and
// an INSERT through an updatable view lands on the wrong shard. The
// planner therefore refuses to create one through the router, and
// refuses statements naming one (made before a table was sharded, or
// directly on a shard) unless everything it reads is placed with it.
// Expanding a view into its query, so that it could be planned like a
// derived table, is planned.

// Views is a snapshot of one database's views and materialized views
// and the tables each reads, directly or through other views (pg_depend
// of their rewrite rules). The Schema takes it from the authoritative
// shard, which has every view because DDL runs everywhere.
type Views struct {
	reads map[[2]string][][2]string // (schema, view) -> (schema, table)
	// rules: (schema, table) -> (schema, relation) of a table's own
	// rules (CREATE RULE ... DO ALSO INSERT INTO log ...), which run
	// wherever the table's rows are written.
	rules map[[2]string][][2]string
}

// NewViews builds a snapshot from edges (view schema, view name, schema
// and name of a relation it reads), following views that read views,
// and the edges of tables' own rules.
func NewViews(edges, rules [][4]string) *Views {
	direct := map[[2]string][][2]string{}
	for _, e := range edges {
		v := [2]string{e[0], e[1]}
		direct[v] = append(direct[v], [2]string{e[2], e[3]})
	}
	v := &Views{reads: make(map[[2]string][][2]string, len(direct)), rules: map[[2]string][][2]string{}}
	for _, e := range rules {
		t := [2]string{e[0], e[1]}
		v.rules[t] = append(v.rules[t], [2]string{e[2], e[3]})
	}
	for view := range direct {
		seen := map[[2]string]bool{view: true}
		var tables [][2]string
		var visit func([2]string)
		visit = func(rel [2]string) {
			for _, r := range direct[rel] {
				if seen[r] {
					continue
				}
				seen[r] = true
				if _, isView := direct[r]; isView {
					visit(r)
				} else {
					tables = append(tables, r)
				}
			}
		}
		visit(view)
		v.reads[view] = tables
	}
	return v
}

// checkView refuses r if it names a view (in its schema, or unqualified
// in any schema of the search path) that reads a table not placed with
// it.
func (c *planCtx) checkView(r *tableRef) error {
	if len(c.top.Shards()) == 1 || c.listed(r) {
		// One shard holds everything; a table the topology lists is
		// not a view.
		return nil
	}
	if c.views == nil {
		v, err := c.schema.Views(c.in.Database)
		if err != nil {
			c.noCache = true
			return err
		}
		c.views = v
	}
	if len(c.views.reads) == 0 {
		return nil
	}
	schemas := []string{r.name.Schema}
	if r.rv.Schemaname == "" {
		// The router cannot see which schema of the path holds the name;
		// any that has such a view refuses.
		schemas = c.in.SearchPath
		if len(schemas) == 0 {
			schemas = defaultSearchPath
		}
	}
	for _, s := range schemas {
		for _, t := range c.views.reads[[2]string{s, r.rv.Relname}] {
			if !placedWith(c.top.Resolve(c.in.Database, t[0], t[1]), r.place) {
				return unsupported("a view over tables on other shards is not supported yet: %s.%s reads %s.%s",
					s, r.rv.Relname, t[0], t[1])
			}
		}
	}
	return nil
}

// placedWith reports whether every shard of view's placement holds all
// the rows of table that a query there may read: table is a reference
// table on each of those shards, or a table of the same shard group (whose
// rows the view's own placement routes alike).
func placedWith(table, view *topo.Placement) bool {
	if view == nil || view.Group == nil {
		return false
	}
	if table.IsReference() {
		for _, s := range view.Group.Shards() {
			held := false
			for _, g := range table.ReferenceGroups {
				held = held || contains(g.Shards(), s)
			}
			if !held {
				return false
			}
		}
		return true
	}
	return table.Group == view.Group
}

// viewReadsElsewhere refuses a CREATE VIEW whose query reads a table not
// placed with the view (refs: the statement's relations, the view's own
// among them).
func (c *planCtx) viewReadsElsewhere(view *pg_query.RangeVar, refs []*tableRef) error {
	var v *tableRef
	for _, r := range refs {
		if r.rv == view {
			v = r
		}
	}
	if v == nil || v.catalog {
		return nil
	}
	for _, r := range refs {
		if r == v || r.catalog || placedWith(r.place, v.place) {
			continue
		}
		if v.rv.Relpersistence == "t" && r.place.Group != nil && contains(r.place.Group.Shards(), c.top.AuthoritativeShard()) && r.place.Group.SingleShard() {
			continue
		}
		return unsupported("a view over tables on other shards is not supported yet: %s reads %s", v.name.Schema+"."+v.name.Table, r.name.Schema+"."+r.name.Table)
	}
	return nil
}

// listed reports whether the topology lists r's name as a table or
// reference table of its schema.
func (c *planCtx) listed(r *tableRef) bool {
	d := c.top.Databases[r.name.Database]
	if d == nil {
		return false
	}
	sc := d.Schemas[r.name.Schema]
	return sc != nil && (sc.Tables[r.name.Table] != nil || sc.ReferenceTables[r.name.Table] != nil)
}

// checkRules refuses a write to target if a rule of its own names a
// relation not placed with it: the rule's action (an INSERT into a log,
// say) runs on the shard of the row written, into that shard's copy.
func (c *planCtx) checkRules(st *Statement, target *tableRef) {
	if st.Err != nil || target == nil || target.catalog || len(c.top.Shards()) == 1 {
		return
	}
	if c.views == nil {
		v, err := c.schema.Views(c.in.Database)
		if err != nil {
			c.noCache = true
			st.Err = err
			return
		}
		c.views = v
	}
	for _, rel := range c.views.rules[[2]string{target.name.Schema, target.name.Table}] {
		tables := [][2]string{rel}
		if through, ok := c.views.reads[rel]; ok {
			tables = through // a view the rule names: what it reads
		}
		for _, t := range tables {
			if !placedWith(c.top.Resolve(c.in.Database, t[0], t[1]), target.place) {
				st.Err = unsupported("a write to %s.%s, whose rule names %s.%s on other shards, is not supported yet",
					target.name.Schema, target.name.Table, t[0], t[1])
				return
			}
		}
	}
}
