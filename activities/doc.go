// Package activities holds the retryable, idempotent steps that Tessera's
// workflows are made of: each talks to sidecars, pgmanager or the topology
// service and can run again safely after a partial failure.
//
// For high availability (package workflows' Failover, Switchover,
// SetDurability, Rejoin and RepairShard) it owns:
//
//   - activities.go: Activities, its configuration and the cache of sidecar
//     clients, found by instance id through discovery records;
//   - inspect.go: InspectShard, one snapshot of a shard (its ShardState and
//     every registered instance's health) that workflows decide from;
//   - instance.go: the per-instance operations (fence, unfence, promote,
//     follow, rewind) and the waits for replay and streaming;
//   - shardstate.go: the writes to ShardState (publish a primary, buffer
//     signal, durability policy);
//   - durability.go: which replicas a policy makes synchronous standbys,
//     and applying that to a primary;
//   - drain.go: waiting for the transactions open on a primary to end
//     before a switchover fences it;
//   - heartbeat.go: every activity's heartbeat, so that a step whose
//     worker died runs again elsewhere within seconds;
//   - errors.go: how failures reach workflows: as Temporal application
//     errors whose type is the SQLSTATE, retryable or not.
//
// For atomic commits across shards (package twophase) it owns
// prepared.go: ResolvePrepared, the recovery pass that finishes the
// prepared transactions a router left behind (workflow ResolvePrepared).
package activities
