// Package workflows holds Tessera's operations as durable Temporal
// workflows: failover, switchover, MoveTables, Reshard, OnlineDDL and
// cutover. Each step is an activity from package activities, so a workflow
// resumes where it stopped after any crash.
package workflows
