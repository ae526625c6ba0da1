package planner

import (
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// Routines is a snapshot of one database's aggregate and window functions
// (pg_proc.prokind 'a' or 'w'), which a call by name alone cannot be told
// from a plain function: my_sum(x) over the rows of several shards would
// answer one row per shard. The Schema takes it from the authoritative
// shard, which has every function because DDL runs everywhere.
type Routines struct {
	schemas map[string][]string // lower-case name -> lower-case schemas having one
}

// NewRoutines builds a snapshot from (schema, name) pairs.
func NewRoutines(pairs [][2]string) *Routines {
	r := &Routines{schemas: make(map[string][]string, len(pairs))}
	for _, p := range pairs {
		name, schema := strings.ToLower(p[1]), strings.ToLower(p[0])
		if !contains(r.schemas[name], schema) {
			r.schemas[name] = append(r.schemas[name], schema)
		}
	}
	return r
}

// unknownAggregate reports whether fc may call an aggregate or window
// function other than the built-ins the planner knows by name (the
// aggregates list, resolved in pg_catalog): a user's aggregate, one of
// pg_catalog's that the list lacks, or a user's aggregate named like a
// built-in that the search path finds first. Names compare without case,
// which may only refuse more. A nil snapshot (the session's transaction
// ran DDL the snapshot cannot see) takes every call of a function not known
// to be plain or a known aggregate as unknown.
func (r *Routines) unknownAggregate(fc *pg_query.FuncCall, searchPath []string) bool {
	name := funcName(fc)
	if r == nil {
		return !(builtinCall(fc) && (aggregates[name] || sideEffectFree[name]))
	}
	schemas := r.schemas[name]
	if len(schemas) == 0 {
		return false
	}
	if n := len(fc.Funcname); n > 1 {
		// schema.name, or database.schema.name.
		schema := strings.ToLower(fc.Funcname[n-2].GetString_().GetSval())
		if !contains(schemas, schema) {
			return false
		}
		return schema != "pg_catalog" || !aggregates[name]
	}
	if len(searchPath) == 0 {
		searchPath = defaultSearchPath
	}
	for _, s := range schemas {
		switch {
		case s == "pg_catalog":
			// Searched first unless the path names it later.
			if !aggregates[name] {
				return true
			}
		case containsFold(searchPath, s):
			return true
		}
	}
	return false
}

var defaultSearchPath = []string{"public"}

func containsFold(list []string, s string) bool {
	for _, x := range list {
		if strings.EqualFold(x, s) {
			return true
		}
	}
	return false
}

// userAggregates is the reason a read calling aggregate or window functions
// the planner does not know is refused across shards: no merge is known
// to compute them as Postgres does.
const userAggregates = "user-defined aggregate or window functions"

// checkCalls asks the catalog snapshot whether any plain-looking call of
// the statement is an aggregate or window function the planner does not
// know, and records it as a construct no merge can do. Only reads across
// several shards need it, and only those with function calls pay for it.
func (c *planCtx) checkCalls(f *facts) error {
	if len(f.calls) == 0 {
		return nil
	}
	var r *Routines
	if !c.in.UncommittedDDL && !c.afterDDL {
		var err error
		if r, err = c.schema.Routines(c.in.Database); err != nil {
			c.noCache = true
			return err
		}
	}
	for _, fc := range f.calls {
		if r.unknownAggregate(fc, c.in.SearchPath) {
			f.cross(userAggregates)
			return nil
		}
	}
	return nil
}
