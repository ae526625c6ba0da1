// Package twophase is what the router (which coordinates an atomic commit
// across shards) and the recovery activity (which resolves the prepared
// transactions a lost coordinator left) must agree on: how a global
// transaction id names its commit point, the table that holds commit
// decisions, and the SQL that reads a decision for good.
//
// The protocol is presumed abort. The router prepares every written
// shard but one, the commit point, with PREPARE TRANSACTION gid; then, in
// the commit point's still-open transaction, inserts the decision row
// (gid, 'commit') into _tessera.commit_decisions and commits: that
// commit is the transaction's commit point. Then it runs COMMIT PREPARED
// everywhere else. Recovery decides a prepared gid with Decide: it
// inserts (gid, 'abort') unless a row exists. A coordinator still inside
// its commit-point transaction holds the gid's unique-index entry, so
// recovery's insert waits for it and then sees its outcome; a coordinator
// that arrives after recovery decided abort fails on the unique index
// (23505) and rolls back. Either way every participant gets the one
// outcome the row holds.
//
// The package holds no state and opens no connection: callers run the SQL
// it gives on the sessions they have.
package twophase
