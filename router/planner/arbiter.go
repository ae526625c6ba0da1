package planner

import (
	"slices"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// ON CONFLICT into a sharded table: each shard checks its own rows only,
// so an arbiter (the unique index or exclusion constraint ON CONFLICT
// tests) is enforced across the table only if it includes the shard-key
// column; rows equal on its columns then have equal keys and live on one
// shard. With an arbiter that lacks it, one Postgres would find the
// conflicting row on another shard and update it (or skip the new one);
// the shard would insert a second row. Such a statement is refused.

// UniqueIndex is a unique index or exclusion constraint of a table, as an
// arbiter of ON CONFLICT sees it.
type UniqueIndex struct {
	// Name is the index's name; Constraint the constraint it backs, or "".
	Name, Constraint string
	// Columns are its key columns, "" for an expression.
	Columns []string
}

// checkArbiter refuses an ON CONFLICT clause on target, a sharded table,
// whose arbiter does not include the shard-key column.
func (c *planCtx) checkArbiter(oc *pg_query.OnConflictClause, target *tableRef) error {
	if oc == nil {
		return nil
	}
	column := target.place.ShardColumn()
	infer := oc.GetInfer()
	if elems := infer.GetIndexElems(); len(elems) > 0 {
		for _, e := range elems {
			if e.GetIndexElem().GetName() == column {
				return nil
			}
		}
		return unsupported("ON CONFLICT on sharded table %s with an arbiter that lacks its shard key column %s is not supported: each shard checks only its own rows", target.name, column)
	}
	indexes, err := c.schema.UniqueIndexes(target.name.Database, target.name.Schema, target.name.Table)
	if err != nil {
		c.noCache = true
		return err
	}
	if name := infer.GetConname(); name != "" {
		for _, ix := range indexes {
			if ix.Constraint == name && !slices.Contains(ix.Columns, column) {
				return unsupported("ON CONFLICT ON CONSTRAINT %s of sharded table %s, which lacks its shard key column %s, is not supported: each shard checks only its own rows", name, target.name, column)
			}
		}
		return nil
	}
	// No target (DO NOTHING): every unique index and exclusion
	// constraint is an arbiter.
	for _, ix := range indexes {
		if !slices.Contains(ix.Columns, column) {
			return unsupported("ON CONFLICT DO NOTHING on sharded table %s, whose unique index %s lacks its shard key column %s, is not supported: each shard checks only its own rows (name an arbiter that includes it)", target.name, ix.Name, column)
		}
	}
	return nil
}
