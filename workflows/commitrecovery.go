package workflows

import (
	"time"

	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/activities"
)

// Recovery of atomic commits (package twophase): ResolvePrepared finishes
// the prepared transactions a router left behind. A schedule runs it
// every CommitRecoveryInterval (workflows/launch creates it when a worker
// starts), and a router that lost a participant mid-commit starts it at
// once. One runs at a time: ResolvePreparedID.
const (
	ResolvePreparedName = "ResolvePrepared"
	// ResolvePreparedID is the id of a run started by a router; the
	// schedule's runs get it with the scheduled time appended.
	ResolvePreparedID = "resolve-prepared"
	// ResolvePreparedScheduleID is the schedule's id.
	ResolvePreparedScheduleID = "resolve-prepared-schedule"
)

// Recovery timing. A transaction prepared longer than
// CommitRecoveryOlderThan is taken from its coordinator, which has
// normally finished within milliseconds; with the schedule every
// CommitRecoveryInterval, none stays prepared longer than about twice
// the interval while the shards and a worker are up. Decisions are kept
// CommitDecisionRetention after the last participant finished.
const (
	CommitRecoveryInterval  = time.Minute
	CommitRecoveryOlderThan = 30 * time.Second
	CommitDecisionRetention = time.Hour
)

// DefaultResolvePreparedInput is what the schedule and routers pass.
func DefaultResolvePreparedInput() activities.ResolvePreparedInput {
	return activities.ResolvePreparedInput{OlderThan: CommitRecoveryOlderThan, Retention: CommitDecisionRetention}
}

// resolving: a pass reads every primary and may wait on a commit point's
// row lock; its attempts are retried, each idempotent.
var resolving = budget{2 * time.Minute, 5}

// ResolvePrepared runs one recovery pass.
func ResolvePrepared(ctx workflow.Context, in activities.ResolvePreparedInput) (activities.ResolvePreparedResult, error) {
	var res activities.ResolvePreparedResult
	err := remote(ctx, resolving, "resolve prepared transactions", acts.ResolvePrepared, in).Get(ctx, &res)
	return res, err
}
