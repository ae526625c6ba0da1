// Package ddl owns what Tessera knows about schema changes without
// touching a server: which path an online schema change takes
// (classify.go: direct, shadow or refused, and why), and how to compare a
// table's definition between shards (schema.go: the definition's shape
// and the differences).
//
// It is pure (no connections, no Temporal) so that the router, the
// OnlineDDL workflow's activities (package onlineddl) and the CLI can all
// use it without import cycles. What the classifier cannot see in the
// statement (a column's current type, a CHECK constraint that proves a
// column NOT NULL) it takes as TableFacts read from a shard's catalog by
// the caller; without them it answers as if nothing were proven.
package ddl
