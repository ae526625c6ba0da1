// Package workflows holds Tessera's operations as durable Temporal
// workflows: failover, switchover, durability, rejoin, repair, Reshard
// (reshard.go; its cutovers SwitchTraffic and ReverseTraffic in
// reshard_cutover.go), MoveTables (movetables.go, on Reshard's run loop),
// and OnlineDDL with SchemaCheck (onlineddl.go for the direct path,
// onlineddl_shadow.go for the shadow-table path). Each step is an activity (package activities, or for Reshard package
// replicator/actions and for OnlineDDL package onlineddl, called by name so
// that this package links neither the Replicator nor the SQL parser), so a
// workflow resumes where it stopped after any crash.
//
// For high availability it owns the decisions: which replica to promote
// (candidate.go), in what order to fence, promote, publish and repoint
// (failover.go, switchover.go), how to undo a switchover that failed
// before the new primary was published, how a former primary rejoins
// (rejoin.go), what RepairShard mends (repair.go) and durability policy
// changes (durability.go). names.go is the contract with the admin and the
// CLI (task queue, workflow type names, ids, the step query); register.go
// registers everything on a worker; calls.go gives each activity its
// timeout and retry policy; ui.go is what the Temporal Web UI shows of a
// run (summaries, current details, the TesseraPhase search attribute).
//
// Workflow code here is deterministic: time comes from workflow.Now,
// iteration is over sorted slices, and everything that touches the world
// is an activity.
package workflows
