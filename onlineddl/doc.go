// Package onlineddl holds the activities of the OnlineDDL and SchemaCheck
// workflows (package workflows): PlanOnlineDDL classifies a statement
// (package ddl) with the facts of the table's catalog and finds the shards
// that hold the table, ApplyDDL runs the statement on one shard's primary,
// idempotently, and CheckSchema compares every table's definition between
// the shards that hold it.
//
// # The shadow path
//
// A statement that rewrites its table runs on one shard as PrepareShadow
// (a shadow table LIKE the table, the statement run on it), CopyShadow (a
// resumable copy from the forward slot's exported snapshot, cast to the
// new types), SwapShadow (the forward stream caught up, then under the
// table's lock the stream run to a marker and the tables exchanged, with
// what hangs off the table by OID moved: see exchange), StreamShadow (the
// reverse stream into the old table), RevertShadow, CompleteShadow and
// CancelShadow. The copy, the streams and their bookkeeping are the
// replicator's (package replicator), applied within one database from the
// table into another (replicator.StreamTable.Into). Each shard records
// its state in _tessera.shadow_migrations, changed in the transaction of
// the step it records, so every activity is idempotent.
//
// # Idempotence
//
// A retried ApplyDDL must not run a change twice, nor fail because an
// earlier attempt made it. A statement that runs in a transaction runs in
// one with a row in _tessera.ddl_migrations naming the migration (the
// workflow id and run id): the row exists exactly when the change does, and
// an attempt that finds it does nothing. CREATE INDEX CONCURRENTLY cannot
// run in a transaction: an attempt that finds the index valid does
// nothing, and one that finds it INVALID (a failed or interrupted build)
// drops it first; DROP INDEX CONCURRENTLY is done once the index is gone.
// CheckSchema leaves the _tessera schema out.
//
// # Reaching Postgres
//
// Like the Replicator's activities (package replicator/actions), these
// connect to shard primaries directly, through a Connector: the worker
// gives them the Replicator's (the shard's recorded primary, a user whose
// password it reads from a file at each connection). Inputs and errors
// name shards and databases, never the password.
package onlineddl
