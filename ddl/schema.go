package ddl

import (
	"fmt"
	"sort"
	"strings"
)

// TableDef is one table's definition on one shard, as the schema check
// compares it: what a client could see differ between shards.
type TableDef struct {
	// Columns in attnum order: a different order changes SELECT *.
	Columns []ColumnDef `json:"columns"`
	// Constraints maps a constraint's name to pg_get_constraintdef(),
	// with " NOT VALID" when it is not validated yet.
	Constraints map[string]string `json:"constraints,omitempty"`
	// Indexes maps an index's name to pg_get_indexdef(), with " INVALID"
	// when a concurrent build failed.
	Indexes map[string]string `json:"indexes,omitempty"`
}

// ColumnDef is one column: type as format_type() writes it, nullability
// and default expression.
type ColumnDef struct {
	Name    string `json:"name"`
	Type    string `json:"type"`
	NotNull bool   `json:"not_null,omitempty"`
	Default string `json:"default,omitempty"`
}

func (c ColumnDef) String() string {
	s := c.Type
	if c.NotNull {
		s += " NOT NULL"
	}
	if c.Default != "" {
		s += " DEFAULT " + c.Default
	}
	return s
}

// Schema is every table of one database on one shard, by schema.name.
type Schema map[string]TableDef

// Difference is one way a table's definition on a shard differs from the
// same table on the reference shard (the first shard, in the order given,
// that holds it).
type Difference struct {
	Table     string `json:"table"`
	Shard     string `json:"shard"`
	Reference string `json:"reference"`
	What      string `json:"what"`
}

func (d Difference) String() string {
	// What names the reference shard already.
	return fmt.Sprintf("%s on %s: %s", d.Table, d.Shard, d.What)
}

// Compare reports every difference of every table between the shards
// that hold it, shards in order (the first one holding a table is its
// reference). A table only some shards hold is not a difference: a
// table's placement decides where it lives.
func Compare(shards []string, schemas map[string]Schema) []Difference {
	var tables []string
	seen := map[string]bool{}
	for _, s := range shards {
		for t := range schemas[s] {
			if !seen[t] {
				seen[t] = true
				tables = append(tables, t)
			}
		}
	}
	sort.Strings(tables)
	var out []Difference
	for _, t := range tables {
		ref := ""
		for _, s := range shards {
			def, ok := schemas[s][t]
			if !ok {
				continue
			}
			if ref == "" {
				ref = s
				continue
			}
			for _, what := range diffTable(schemas[ref][t], def, ref, s) {
				out = append(out, Difference{Table: t, Shard: s, Reference: ref, What: what})
			}
		}
	}
	return out
}

// diffTable lists how b (on shard bs) differs from a (on shard as).
func diffTable(a, b TableDef, as, bs string) []string {
	var out []string
	ac, bc := columnMap(a.Columns), columnMap(b.Columns)
	for _, c := range a.Columns {
		other, ok := bc[c.Name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("column %s missing (%s on %s)", c.Name, c, as))
		case other != c:
			out = append(out, fmt.Sprintf("column %s is %s, %s on %s", c.Name, other, c, as))
		}
	}
	for _, c := range b.Columns {
		if _, ok := ac[c.Name]; !ok {
			out = append(out, fmt.Sprintf("extra column %s %s (not on %s)", c.Name, c, as))
		}
	}
	if len(out) == 0 && columnOrder(a.Columns) != columnOrder(b.Columns) {
		out = append(out, fmt.Sprintf("column order (%s), (%s) on %s", columnOrder(b.Columns), columnOrder(a.Columns), as))
	}
	out = append(out, diffNamed("constraint", a.Constraints, b.Constraints, as)...)
	out = append(out, diffNamed("index", a.Indexes, b.Indexes, as)...)
	return out
}

func diffNamed(kind string, a, b map[string]string, as string) []string {
	var out []string
	for _, name := range sortedKeys(a) {
		other, ok := b[name]
		switch {
		case !ok:
			out = append(out, fmt.Sprintf("%s %s missing (%s on %s)", kind, name, a[name], as))
		case other != a[name]:
			out = append(out, fmt.Sprintf("%s %s is %s, %s on %s", kind, name, other, a[name], as))
		}
	}
	for _, name := range sortedKeys(b) {
		if _, ok := a[name]; !ok {
			out = append(out, fmt.Sprintf("extra %s %s: %s (not on %s)", kind, name, b[name], as))
		}
	}
	return out
}

func columnMap(cols []ColumnDef) map[string]ColumnDef {
	m := make(map[string]ColumnDef, len(cols))
	for _, c := range cols {
		m[c.Name] = c
	}
	return m
}

func columnOrder(cols []ColumnDef) string {
	names := make([]string, len(cols))
	for i, c := range cols {
		names[i] = c.Name
	}
	return strings.Join(names, ", ")
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}
