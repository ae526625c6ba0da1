// Package topo owns Tessera's data topology: the JSON document that says
// which shard groups exist, which key ranges each shard of a group owns,
// which shard index turns a table's shard-key value into a routing key, and
// which tables are bound to which groups.
//
// Parse decodes and validates a document, reporting every problem with its
// JSON path. A parsed *Topology is immutable and safe for concurrent use;
// Resolve and the routing methods on Placement are on every query's path and
// do not allocate for integer keys. Diff compares two topologies and lists
// every table whose placement changes, which the topology service uses to
// refuse unforced changes that would strand data.
//
// The sharding functions and the canonical value encodings live in
// topo/shardfunc; the etcd-backed topology service lives in topo/store.
package topo
