// Package store is the topology service on etcd. It owns everything
// Tessera keeps in etcd for one cluster, under the prefix
// /tessera/<cluster>/:
//
//   - topology: the data topology document, as canonical JSON. ApplyTopology
//     writes it with compare-and-swap on its revision and refuses, unless
//     forced, a document that would change where existing tables' rows
//     live; GetTopology reads it; a Watcher keeps an immutable Snapshot of
//     it current for the query path.
//   - discovery/<kind>/<id>: one Record per live router, sidecar or worker,
//     attached to a lease that the process keeps alive, so the record
//     disappears when the process dies.
//   - shards/<shard uid>: the ShardState the control plane keeps for one
//     shard (its primary and term, durability policy and buffering
//     signal), updated with compare-and-swap by workflows and watched by
//     routers and the admin.
//
// A document's Revision is the etcd version of its key: 1 for the first
// write, one more for each write after, 0 when none is stored. Deleting
// the key by hand restarts the count.
//
// Package store needs only the etcd client; an embedded etcd server for
// tests and development lives in topo/store/etcdembed, and the behavioural
// tests every Store must pass live in topo/store/storetest.
package store
