package planner

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
)

// tableRef is one table reference of a statement, resolved.
type tableRef struct {
	rv    *pg_query.RangeVar
	name  TableName
	place *topo.Placement
	// catalog is a system catalog (pg_catalog, information_schema): every
	// shard has it, so it never constrains a route.
	catalog bool
	target  bool // the table an INSERT, UPDATE, DELETE, MERGE or COPY FROM writes
}

// qualifier is the name the statement's columns qualify the table by.
func (r *tableRef) qualifier() string {
	if a := r.rv.GetAlias().GetAliasname(); a != "" {
		return a
	}
	return r.rv.Relname
}

// resolveTables resolves every table the statement names. CTE references
// are not tables; a WITH name hides a table of that name everywhere in the
// statement (Postgres scopes it to the WITH's query and its subqueries,
// which is close enough for routing). target is the table written.
func (c *planCtx) resolveTables(f *facts, target *pg_query.RangeVar) ([]*tableRef, error) {
	var refs []*tableRef
	for _, rv := range f.ranges {
		if rv != target && rv.Schemaname == "" && f.ctes[rv.Relname] {
			continue
		}
		r, err := c.resolve(rv)
		if err != nil {
			return nil, err
		}
		r.target = rv == target
		refs = append(refs, r)
	}
	return refs, nil
}

// resolve places one RangeVar. An unqualified name takes the first schema
// of the search path in which the topology lists the table, else the
// path's first schema: the router cannot see which schema really holds an
// unlisted table, so such a table resolves by the defaults of the first
// schema (and database). An unqualified pg_* name that the topology does
// not list is a system catalog, which Postgres searches first.
func (c *planCtx) resolve(rv *pg_query.RangeVar) (*tableRef, error) {
	if rv.Catalogname != "" && rv.Catalogname != c.in.Database {
		return nil, pgerr.New(pgerr.FeatureNotSupported, "cross-database references are not implemented: %s.%s.%s",
			rv.Catalogname, rv.Schemaname, rv.Relname)
	}
	schema := rv.Schemaname
	if schema == "" {
		schema = c.searchSchema(rv.Relname)
	}
	r := &tableRef{rv: rv, name: TableName{c.in.Database, schema, rv.Relname}}
	if schema == "pg_catalog" || schema == "information_schema" {
		r.catalog = true
		return r, nil
	}
	r.place = c.top.Resolve(c.in.Database, schema, rv.Relname)
	return r, nil
}

func (c *planCtx) searchSchema(table string) string {
	path := c.in.SearchPath
	if len(path) == 0 {
		path = []string{"public"}
	}
	if d := c.top.Databases[c.in.Database]; d != nil {
		for _, s := range path {
			if sc := d.Schemas[s]; sc != nil && (sc.Tables[table] != nil || sc.ReferenceTables[table] != nil) {
				return s
			}
		}
	}
	if strings.HasPrefix(table, "pg_") {
		return "pg_catalog"
	}
	return path[0]
}

// fromTables lists the tables of a FROM list, through joins but not into
// subqueries or functions.
func fromTables(items []*pg_query.Node, out []*pg_query.RangeVar) []*pg_query.RangeVar {
	for _, n := range items {
		switch x := n.GetNode().(type) {
		case *pg_query.Node_RangeVar:
			out = append(out, x.RangeVar)
		case *pg_query.Node_JoinExpr:
			out = fromTables([]*pg_query.Node{x.JoinExpr.Larg, x.JoinExpr.Rarg}, out)
		}
	}
	return out
}

// tableNames lists the distinct names of refs, in order.
func tableNames(refs []*tableRef) []TableName {
	var out []TableName
	seen := map[TableName]bool{}
	for _, r := range refs {
		if !seen[r.name] {
			seen[r.name] = true
			out = append(out, r.name)
		}
	}
	return out
}
