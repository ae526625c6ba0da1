// Package actions holds the Replicator's Temporal activities for the
// Reshard workflow (package workflows): PlanReshard, CopyTables,
// StreamChanges, StreamLag, DiffTables, CleanupReshard, the cutover's
// steps (CheckCutover, SetTableBuffer, FenceSources, SetSequences,
// PrepareReverse, SwitchTopology, WaitRouters, ClearTableBuffer,
// UnfenceSources) and CompleteReshard. They take and
// return the workflow's plain-JSON types and call into package replicator,
// so that package workflows needs nothing of the replicator's internals.
//
// Every activity is idempotent and resumable: a retried CopyTables resumes
// from the targets' _tessera.copy_progress rows, a restarted StreamChanges
// from the targets' replication origins, a retried DiffTables from its
// last heartbeat's reports, and CleanupReshard drops only what is there.
// The cutover's steps are idempotent too: a fence or a slot made again
// replaces or keeps the first, a topology switch already done returns its
// revision.
//
// # Reaching Postgres
//
// The other activities reach instances only through their sidecars (gRPC).
// These cannot: a logical replication slot, COPY and a change stream need
// a direct Postgres connection to the source primary (a replication
// connection, "replication=database") and to each target primary. A
// Connector finds them: DiscoveryConnector takes the shard's recorded
// primary (ShardState.Primary in etcd) and that instance's sidecar
// discovery record (its postgres_addr), and a user whose password it
// reads from a file at each connection (so a rotated password is picked
// up). The password is never on a command line, in an activity's input or
// heartbeat (which Temporal stores in its history) or in a log: inputs
// name shards and databases only. The user needs the REPLICATION
// attribute, CREATE on the target databases (for the _tessera schema) and
// ownership of the tables it publishes; whoever holds the password file
// can read and write every shard's data, as the sidecar secret lets one
// control every instance.
//
// # Where they run
//
// CopyTables and StreamChanges read one source shard: a Replicator beside
// that shard's primary (`tessera replicator --shard`, package worker)
// registers them alone (RegisterSource) on its own task queue,
// workflows.ReplicatorQueue(shard), and PlanReshard records that queue in
// the plan for every source and target that has one registered
// (planQueues). A shard without one, and every other activity, runs on the
// workflow's queue ("tessera") of any worker that has a Connector.
// Planned: the replicator reaching its primary over the unix socket
// rather than TCP.
package actions
