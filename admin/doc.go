// Package admin is Tessera's health monitor and recovery leader.
//
// Every admin watches the sidecars registered in the topology service,
// follows each one's Health stream, polls the primaries' replication
// status and follows the shards' ShardState. Several admins may run; one
// holds recovery leadership through an etcd election and only that one
// acts. It acts by starting workflows (Failover, Rejoin, RepairShard)
// through a Starter, never by touching Postgres itself, so that every
// change is durable, idempotent and visible in Temporal.
//
// What to do is decided by Decide, a pure function of what was observed
// (decide.go); the rest of the package gathers the observations
// (monitor.go), holds leadership (leader.go) and starts the workflows
// (admin.go, temporal.go).
package admin
