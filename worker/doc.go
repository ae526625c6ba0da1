// Package worker runs a Temporal worker that registers Tessera's workflows
// and activities on the "tessera" task queue, announces itself in the
// topology service, and, when asked, runs an admin (package admin) that
// starts those workflows when shards need them. Before it polls, it makes
// sure the namespace has the search attributes the workflows set
// (searchattr.go).
//
// It also runs a Replicator (replicator.go, `tessera replicator`): a
// Temporal worker beside one shard's primary that polls that shard's own
// task queue (workflows.ReplicatorQueue) for the Reshard workflow's copies
// and streams reading the shard, and registers in discovery as kind
// replicator.
//
// metrics.go turns the Temporal SDK's metrics (workflow and activity
// durations, ...) into Prometheus metrics when Config.Metrics is set.
package worker
