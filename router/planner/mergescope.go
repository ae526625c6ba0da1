package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/tesseradb/tessera/topo/shardfunc"
)

// mergeScope is the tables an engine plan's SELECT reads: one table, or
// the tables of a join the shards answer whole, each its own part (a
// colocated join, a join with reference tables): every shard joins its
// own rows, so the shards' answers together are the join's rows, and the
// engine merges them as it merges one table's.
//
// The engine knows a column by its name (a group key, a sort key, a
// hidden column). Over several tables a name must therefore stand for
// one table's column throughout the statement: each reference binds its
// name to the table it names (by its qualifier, or, bare, the one table
// that has a column of that name), and a name bound to two tables (i.k
// and e.k both used) leaves the statement to other plans (gathering).
type mergeScope struct {
	tables []*tableRef
	// columns are each table's column names (several tables only).
	columns map[*tableRef][]string
	bound   map[string]*tableRef
}

// singleScope is the scope of a SELECT of one table.
func singleScope(t *tableRef) *mergeScope { return &mergeScope{tables: []*tableRef{t}} }

// joinScope is the scope of a SELECT whose top-level FROM holds the
// tables from (through joins, in any order), when every table the
// statement names is one of them and each has known columns; nil
// otherwise.
func (c *planCtx) joinScope(from []*pg_query.RangeVar, refs []*tableRef) *mergeScope {
	if len(from) < 2 || len(refs) != len(from) {
		return nil
	}
	s := &mergeScope{columns: map[*tableRef][]string{}, bound: map[string]*tableRef{}}
	qualifiers := map[string]bool{}
	for _, rv := range from {
		var ref *tableRef
		for _, r := range refs {
			if r.rv == rv {
				ref = r
			}
		}
		if ref == nil || ref.catalog || qualifiers[ref.qualifier()] {
			return nil
		}
		qualifiers[ref.qualifier()] = true
		cols, err := c.columnNames(ref.name)
		if err != nil || len(cols) == 0 {
			return nil
		}
		s.tables = append(s.tables, ref)
		s.columns[ref] = cols
	}
	return s
}

func (s *mergeScope) single() bool { return len(s.tables) == 1 }

// refers reports whether a qualified column reference names a table of
// the scope, binding its name to that table.
func (s *mergeScope) refers(cr *pg_query.ColumnRef) bool {
	if s.single() {
		return refersTo(cr, s.tables[0])
	}
	if len(cr.Fields) != 2 {
		return false
	}
	name := lastField(cr)
	for _, t := range s.tables {
		if refersTo(cr, t) {
			return contains(s.columns[t], name) && s.bind(name, t)
		}
	}
	return false
}

// bind binds name to t; false if it is bound to another table.
func (s *mergeScope) bind(name string, t *tableRef) bool {
	if prev, ok := s.bound[name]; ok {
		return prev == t
	}
	s.bound[name] = t
	return true
}

// of is the table whose column name is: the one it is bound to, or the
// only table with a column of that name (which binds it); nil for none.
func (s *mergeScope) of(name string) *tableRef {
	if s.single() {
		return s.tables[0]
	}
	if t, ok := s.bound[name]; ok {
		return t
	}
	var found *tableRef
	for _, t := range s.tables {
		if contains(s.columns[t], name) {
			if found != nil {
				return nil // ambiguous: Postgres refuses it too
			}
			found = t
		}
	}
	if found != nil {
		s.bound[name] = found
	}
	return found
}

// columnType is the type of the scope's column name.
func (s *mergeScope) columnType(c *planCtx, name string) (shardfunc.ColumnType, error) {
	t := s.of(name)
	if t == nil {
		return 0, unsupported("column %s of no one table", name)
	}
	return c.columnType(t.name, name)
}

func (s *mergeScope) byteOrdered(c *planCtx, name string, typ shardfunc.ColumnType) bool {
	t := s.of(name)
	return t != nil && c.byteOrdered(t, name, typ)
}

func (s *mergeScope) groupable(c *planCtx, name string, typ shardfunc.ColumnType) bool {
	t := s.of(name)
	return t != nil && c.groupable(t, name, typ)
}

// has reports whether name is a column of the scope.
func (s *mergeScope) has(c *planCtx, name string) bool {
	if s.single() {
		cols, err := c.columnNames(s.tables[0].name)
		return err == nil && contains(cols, name)
	}
	return s.of(name) != nil
}

// ref is a reference to the scope's column name in the shards' SQL:
// bare for one table, qualified by its table over several.
func (s *mergeScope) ref(name string) *pg_query.Node {
	if s.single() {
		return columnRef(name)
	}
	t := s.of(name)
	if t == nil {
		return columnRef(name)
	}
	return &pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: &pg_query.ColumnRef{Fields: []*pg_query.Node{
		pg_query.MakeStrNode(t.qualifier()), pg_query.MakeStrNode(name)}}}}
}
