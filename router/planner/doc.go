// Package planner turns SQL text into routing plans and caches them.
//
// The router calls Plan for every Query and Parse. On a cache miss the text
// is parsed by pg_query (Postgres's own parser) and each statement gets a
// Statement: what it is (Kind), where it runs (Route, Targets, Keys) and
// what it binds to the session. At execution the router asks
// Statement.Shards for the target shards, which routes literal and
// parameter shard-key values through the topology's placements.
//
// # Routes
//
//   - Authoritative: statements touching no table, tables of the
//     authoritative or of any single-shard group, reference tables read
//     alone (from the authoritative shard if it has a copy). The router
//     sends them to Targets inside a transaction too; only a read of no
//     table that changes nothing (no Tables, no SideEffects) may run in
//     the transaction's first shard instead. CREATE TABLE AS EXECUTE and
//     temporary CREATE TABLE AS or SELECT INTO run here, on the
//     authoritative shard.
//   - Shard: the WHERE clause has col = v, v = col or col IN (v, ...),
//     alone or in a conjunction, on a shard-key column (or, for reads and
//     UPDATE/DELETE, an alternate index's column), where v is a literal or
//     a parameter, possibly cast; INSERT ... VALUES with the key column in
//     its column list.
//   - Scatter: every shard of the group, for a SELECT, UPDATE or DELETE
//     without a usable key predicate. A SELECT that needs the rows of
//     several shards combined gets a plan for the router's engine
//     (Statement.Engine, package engine; merge.go and mergeaggregate.go
//     say which shapes: counts, aggregates whose partials the engine
//     finishes (avg from a sum and a count, count(DISTINCT x) from a
//     GROUP BY on x), GROUP BY and DISTINCT on columns of types compared
//     by bytes, HAVING over integer aggregates, ORDER BY integer, bool,
//     numeric and C-collated text columns and aggregates, literal LIMIT
//     and OFFSET), with the SQL the shards run instead when HAVING,
//     LIMIT or OFFSET must apply after the merge or hidden columns carry
//     what the statement does not show (mergehidden.go); the catalog's
//     collation of each text column decides whether it is ordered or
//     grouped (collation.go). A LIMIT alone is MergeLimit. Anything else (other aggregates and ORDER BY
//     keys, user-defined aggregates, which the catalog tells from plain
//     functions (Routines), window functions, UNION/INTERSECT/EXCEPT,
//     such clauses in subqueries) is refused with SQLSTATE 0A000 when it
//     would reach more than one shard, unless it is gathered (below).
//   - Gathered (gather.go): a read-only SELECT that would be refused for
//     needing several shards' rows combined gets a GatherPlan instead:
//     the rows of each table it reads are pulled (columns and
//     single-table filters pushed down) into temporary tables of a
//     transaction on the authoritative shard, which runs the statement
//     rewritten over them. What gathering would answer otherwise than
//     one Postgres (answers that follow the stored order of rows, float
//     sums), what may write, and what is not the client's own SELECT keep
//     the refusal; tessera.gather = off (Input.NoGather) keeps them all.
//
// # Several sharded tables
//
// Nothing is assumed of joins (colocate.go). Two occurrences of sharded
// tables are colocated by an equality of their shard-key columns (tables
// of one group routed by indexes with the same function, with types that
// route alike) among the
// conjuncts of a WHERE or an inner join's ON or USING, an outer join's ON
// (restricting the nullable side), a correlated subquery's WHERE, or as
// k IN (SELECT k FROM ...) of a plain subquery; transitively.
//
//   - If every sharded occurrence is colocated with a table that has a row
//     in every answer row (one of the FROM outside an outer join's
//     nullable side, or required non-null by WHERE), each answer row is
//     made of one shard's rows: the statement routes by a key predicate
//     restricting that table, or scatters.
//   - Otherwise it may run on one shard only: every occurrence must be
//     restricted by its own key predicate or colocated with one that is,
//     and all those predicates' values must reach one shard (Key.Separate;
//     checked by Shards). Else it is refused with 0A000, "a join not on
//     the shard key": a scatter would miss rows pairing across shards, and
//     would repeat on every shard the rows of reference tables that no
//     sharded row anchors.
//
// Reference tables join with anything on the shards holding them; a table
// of a single-shard group joins sharded tables of no other group.
//   - Everywhere: DDL, roles and databases on every shard of the topology,
//     the authoritative shard first (simpler than working out the groups
//     involved, and never wrong); TRUNCATE, LOCK and maintenance on the
//     shards of their tables; writes to a reference table on every shard
//     with a copy. CREATE TABLE AS and SELECT INTO of a table placed in a
//     single-shard group, from tables on its shard, run there first and
//     on the other shards as CREATE TABLE AS ... WITH NO DATA
//     (Statement.Elsewhere, deparsed): the table exists everywhere, as
//     CREATE TABLE makes it, and its rows only on its group's shard. A
//     DROP of relations runs with IF EXISTS on the shards after the
//     first (Elsewhere), which may never have had a relation a function
//     made on the authoritative shard. Statement.Creates and Drops let
//     the router follow the relations a session made on the
//     authoritative shard alone.
//   - Router: transaction control, SET/RESET, DISCARD, FETCH/MOVE/CLOSE,
//     EXPLAIN (TESSERA) and the empty query, which the router handles.
//
// What runs where a statement does not say: a view is placed as an
// unlisted table of its schema, a function or trigger runs where its
// statement or row does, a table's rule where its row is written, and a
// unique index is checked per shard. The catalog snapshots of views.go
// (views and rules), functions.go (SQL and PL/pgSQL bodies, triggers) and
// arbiter.go (unique indexes) let the planner refuse (0A000) what would
// read or write rows on other shards than those: a view, function,
// trigger or rule over tables placed elsewhere, an ON CONFLICT arbiter
// without the shard key.
//
// Not supported (0A000): joins across groups or across shards not on the
// shard key, INSERT without the key into a sharded table (without a column list,
// the values fill the columns in the order Schema.ColumnNames gives),
// INSERT ... SELECT into one other than row by row from a table sharded
// alike (insertselect.go, which runs on the shards; the router runs the
// others itself in the simple protocol, router/insertselect.go), or an INSERT into
// one that reads another sharded table, INSERT or MERGE in a WITH query into a sharded or
// reference table, UPDATE or DELETE in a WITH query of a reference table,
// a
// multi-row INSERT whose rows land on different shards that cannot be
// split by row (a WITH clause, a subquery in RETURNING, RETURNING with ON
// CONFLICT DO NOTHING; Shards reports the others with ErrSplitInsert and
// SplitInsert splits them), UPDATE of a shard key in the shapes keymove.go
// refuses (other UPDATEs of a shard key plan as a KeyMove, which the
// router runs as UPDATE, DELETE and a split INSERT), MERGE into a sharded table (COPY FROM STDIN into
// one is planned as a CopyInto, which the router splits by row; COPY FROM
// without the key column, with WHERE, or into a table with alternate
// indexes is refused),
// CREATE TABLE AS or SELECT INTO reading sharded tables, placed in a
// sharded group or with parameters, server-side COPY files, cursors over
// several shards, SQL-level PREPARE of statements that do not run on the
// authoritative shard. Temporary tables, LISTEN, LOAD, PREPARE and
// session-level advisory locks run on the authoritative shard and are
// flagged in SessionState.
//
// # The plan cache
//
// Plans are cached by the statement's shape: a fast pure-Go scanner
// replaces each literal with a placeholder of its class (integer, numeric,
// string, ...), drops comments and collapses whitespace; the key also holds
// the database, search path, parameter types and topology revision. A hit
// re-reads the routing literals from the new text by their token index, so
// SELECT ... WHERE id = 42 and ... WHERE id = 1 share one plan and still go
// to their own shards.
//
// Sharing is sound only if the scanner's literal tokens are exactly the
// constants Postgres's parser made. On a miss every literal token is
// matched with an A_Const location (a folded unary minus puts the location
// on the sign); if one is unmatched (a COMMENT string, a function body, two
// strings concatenated across a line break), if the scanner met something
// it does not model (1_000, an unterminated quote), or if the plan holds a
// literal's value (SET), the input is cached by its exact text instead.
// Routing literals must be integers, other numbers, standard strings or
// dollar-quoted strings; an E'..' or similar value is not used as a key.
// Plans holding a Schema error are not cached. Normalize (normalize.go)
// writes a shape with $n for its literals, for query insights.
//
// Literal text is read as with standard_conforming_strings on, the default
// since Postgres 9.1 and what pg_query assumes.
package planner
