package topo

import (
	"fmt"
	"strings"
)

// Change is a difference in where a table's rows live between two
// topologies: its shard group, its shard index, or its group's key ranges.
type Change struct {
	// Table is db.schema.table; a "*" stands for every table not listed by
	// name at that level (db.schema.* is every unlisted table of a schema).
	Table string
	Old   string // placement before, as Describe writes it
	New   string // placement after
}

func (c Change) String() string { return fmt.Sprintf("%s: %s -> %s", c.Table, c.Old, c.New) }

// Diff lists every table whose placement differs between old and new: a
// different group, a different index (type, column or modulus), different
// alternates, or different key ranges in its group. Applying a topology
// with changes moves rows' homes without moving the rows, so the topology
// service refuses it unless forced by a data-movement workflow.
//
// Replica reads count too: where a group's replica key ranges
// (ReplicaReads) differ, the tables' changes are listed again with the
// prefix "replica reads of ", so that only a data-movement workflow moves
// replica reads either.
func Diff(old, new *Topology) []Change {
	out := diff(old, new, "")
	if old.replica != nil || new.replica != nil {
		out = append(out, diff(old.ReplicaReads(), new.ReplicaReads(), "replica reads of ")...)
	}
	return out
}

func diff(old, new *Topology, prefix string) []Change {
	var out []Change
	seen := map[string]bool{}
	check := func(db, schema, table string) {
		name := prefix + db + "." + schema + "." + table
		if seen[name] {
			return
		}
		seen[name] = true
		o, n := old.describeScope(db, schema, table), new.describeScope(db, schema, table)
		if o != n {
			out = append(out, Change{Table: name, Old: o, New: n})
		}
	}
	check("*", "*", "*")
	for _, t := range []*Topology{old, new} {
		for _, dbName := range sortedKeys(t.Databases) {
			check(dbName, "*", "*")
			for _, sName := range sortedKeys(t.Databases[dbName].Schemas) {
				check(dbName, sName, "*")
				s := t.Databases[dbName].Schemas[sName]
				for _, tName := range sortedKeys(s.Tables) {
					check(dbName, sName, tName)
				}
				for _, tName := range sortedKeys(s.ReferenceTables) {
					check(dbName, sName, tName)
				}
			}
		}
	}
	return out
}

// describeScope describes the placement of a table, where "*" for the
// table, schema or database means one not listed by name.
func (t *Topology) describeScope(db, schema, table string) string {
	switch {
	case db == "*":
		return t.clusterDefault.Describe()
	case schema == "*":
		if d := t.Databases[db]; d != nil {
			return d.unlisted.Describe()
		}
		return t.clusterDefault.Describe()
	case table == "*":
		if d := t.Databases[db]; d != nil {
			if s := d.Schemas[schema]; s != nil {
				return s.unlisted.Describe()
			}
			return d.unlisted.Describe()
		}
		return t.clusterDefault.Describe()
	}
	return t.Resolve(db, schema, table).Describe()
}

// Describe writes a placement in full: group, ranges with their shards,
// index with its function and column, and alternates. Two placements route
// every row alike exactly when their descriptions are equal.
func (p *Placement) Describe() string {
	var b strings.Builder
	if p.IsReference() {
		b.WriteString("reference on")
		for _, g := range p.ReferenceGroups {
			b.WriteString(" ")
			g.describe(&b)
		}
		return b.String()
	}
	p.Group.describe(&b)
	if p.Index != nil {
		b.WriteString(" by ")
		p.Index.describe(&b)
	}
	for _, a := range p.Alternates {
		b.WriteString(" alt ")
		a.describe(&b)
	}
	return b.String()
}

func (g *ShardGroup) describe(b *strings.Builder) {
	b.WriteString(g.UID)
	b.WriteString("{")
	for i, r := range g.byStart {
		if i > 0 {
			b.WriteString(" ")
		}
		b.WriteString(r.String())
		b.WriteString("=")
		b.WriteString(r.ShardUID)
	}
	b.WriteString("}")
}

func (ix *ShardIndex) describe(b *strings.Builder) {
	fmt.Fprintf(b, "%s(%s(%s)", ix.Name, ix.Func.Kind, ix.Column())
	if ix.Func.Modulus != 0 {
		fmt.Fprintf(b, " mod %d", ix.Func.Modulus)
	}
	b.WriteString(")")
}
