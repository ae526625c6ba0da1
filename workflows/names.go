package workflows

import "time"

// TaskQueue is the Temporal task queue Tessera's workers poll.
const TaskQueue = "tessera"

// StepQuery is the query every workflow here answers with its current
// step as a readable string, e.g. "fencing old primary shard-1-0".
const StepQuery = "step"

// Workflow type names, as registered and as admins start them.
const (
	FailoverName      = "Failover"
	SwitchoverName    = "Switchover"
	SetDurabilityName = "SetDurability"
	RejoinName        = "Rejoin"
	RepairShardName   = "RepairShard"
)

// Workflow ids: one failover, switchover or repair per shard and one
// rejoin per instance can run at a time, because Temporal refuses a
// second running workflow with the same id.

// FailoverID is the workflow id of a shard's failover.
func FailoverID(shard string) string { return "failover-" + shard }

// SwitchoverID is the workflow id of a shard's switchover.
func SwitchoverID(shard string) string { return "switchover-" + shard }

// RejoinID is the workflow id of an instance's rejoin.
func RejoinID(instance string) string { return "rejoin-" + instance }

// RepairID is the workflow id of a shard's repair.
func RepairID(shard string) string { return "repair-" + shard }

// ReplicatorQueue is the task queue of the Replicator beside a shard's
// primary (`tessera replicator --shard`): the Reshard workflow routes the
// activities that read one source shard (CopyTables, StreamChanges) there
// when its plan found that shard's replicator registered.
func ReplicatorQueue(shard string) string { return "replicator-" + shard }

// TaskTimeout is the workflow task timeout to start a workflow type
// with, 0 for Temporal's default (10 s). A worker that dies while it
// runs a workflow task holds the workflow up this long. Reshard and
// MoveTables take 5 s: in a cutover the routers hold the tables'
// statements at most 10 s, which a dead worker must not use up (a
// run continued as new keeps its predecessor's timeout).
func TaskTimeout(workflowType string) time.Duration {
	switch workflowType {
	case ReshardName, MoveTablesName:
		return movementTaskTimeout
	}
	return 0
}

// movementTaskTimeout leaves a busy worker room to replay a movement's
// longest history (reshardHistoryLimit events) in one workflow task.
const movementTaskTimeout = 5 * time.Second
