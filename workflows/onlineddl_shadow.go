package workflows

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/pgerr"
)

// shadowVersion gates the shadow path in OnlineDDL's command sequence: a
// migration started before it ends with 0A000 as it did.
const shadowVersion = "onlineddl-shadow-path"

const (
	// shadowBufferMillis is how long routers hold the table's
	// statements around one shard's swap at most; the swap ends the hold
	// as soon as it commits.
	shadowBufferMillis = 10000
	// shadowCopyTimeout bounds one copy attempt, which heartbeats.
	shadowCopyTimeout = 24 * time.Hour
	// shadowHeartbeatTimeout: a step whose worker died is retried this
	// long after its last heartbeat. The activities heartbeat every 5 s
	// (package onlineddl), and the worker sends heartbeats on within 1 s.
	shadowHeartbeatTimeout = 20 * time.Second
)

// Phases of a migration on the shadow path.
const (
	PhaseSwapping  = "swapping"
	PhaseSwapped   = "swapped" // waiting for Complete or Revert
	PhaseReverting = "reverting"
	PhaseReverted  = "reverted"
)

// shadowPlanned answers whether the shadow path runs in this workflow: a
// run whose history predates it refuses the statement as before.
func shadowPlanned(ctx workflow.Context) bool {
	return workflow.GetVersion(ctx, shadowVersion, workflow.DefaultVersion, 1) == workflow.DefaultVersion
}

// shadow runs the migration on the shadow path: on every shard at once,
// PrepareShadow and CopyShadow; once every shard has its copy, SwapShadow
// on every shard at once. Each shard's step is retried with backoff until
// it succeeds or fails for good, so the shards converge on the new
// schema. Until every shard is copied the migration can be cancelled
// (the Cancel update, or cancelling the workflow): CancelShadow then
// leaves nothing of it on any shard. After the swap, with
// HoldForRevert, the reverse streams keep the old tables current until
// the Complete update (which drops them) or the Revert update (which
// swaps them back, with every write made since); without it the old
// tables are dropped at once.
func (m *migration) shadow(ctx, planCtx workflow.Context) error {
	for _, s := range m.plan.Shards {
		m.prog.Shards = append(m.prog.Shards, ShardDDLState{Shard: s, State: ShardPending})
	}
	m.phase(ctx, PhaseCopying)
	err := m.everyShard(planCtx, func(ctx workflow.Context, i int) error {
		if err := m.shadowStep(ctx, i, PrepareShadowActivity, "prepare the shadow table"); err != nil {
			return err
		}
		return m.shadowStep(ctx, i, CopyShadowActivity, "copy into the shadow table")
	})
	if m.cancelRequested || ctx.Err() != nil {
		return m.cancelShadow(ctx)
	}
	if err != nil {
		if cerr := m.cancelShadow(ctx); !temporal.IsCanceledError(cerr) {
			return failed(err, "preparing the shadow tables (and undoing them: %s)", errText(cerr))
		}
		return failed(err, "preparing the shadow tables; the migration was undone on every shard")
	}
	// From here the swap may happen on some shard: the migration goes on
	// until every shard has it.
	m.started = true
	work, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		ctx.Done().Receive(ctx, nil)
		m.p.step("cancel refused: the swap has started on the shards; the migration goes on until every shard has it")
	})
	m.phase(work, PhaseSwapping)
	if err := m.everyShard(work, func(ctx workflow.Context, i int) error {
		return m.shadowStep(ctx, i, SwapShadowActivity, "swap the shadow table in")
	}); err != nil {
		m.check(work)
		return failed(err, "the swap failed for good on a shard: the schema check shows what differs")
	}
	if !m.in.HoldForRevert {
		return m.completeShadow(work)
	}
	return m.holdForRevert(work)
}

// holdForRevert runs the reverse streams until Complete or Revert.
func (m *migration) holdForRevert(ctx workflow.Context) error {
	m.phase(ctx, PhaseSwapped)
	var choice string
	if err := workflow.SetUpdateHandler(ctx, OnlineDDLCompleteUpdate, func(workflow.Context) error {
		if choice != "" {
			return temporal.NewNonRetryableApplicationError("already "+choice, pgerr.ObjectNotInPrerequisiteState, nil)
		}
		choice = OnlineDDLCompleteUpdate
		return nil
	}); err != nil {
		return err
	}
	if err := workflow.SetUpdateHandler(ctx, OnlineDDLRevertUpdate, func(workflow.Context) error {
		if choice != "" {
			return temporal.NewNonRetryableApplicationError("already "+choice, pgerr.ObjectNotInPrerequisiteState, nil)
		}
		choice = OnlineDDLRevertUpdate
		return nil
	}); err != nil {
		return err
	}
	streams, stopStreams := workflow.WithCancel(ctx)
	done := workflow.NewWaitGroup(ctx)
	for i := range m.prog.Shards {
		done.Add(1)
		workflow.Go(streams, func(sctx workflow.Context) {
			defer done.Done()
			m.reverseStream(sctx, i)
		})
	}
	m.p.step("every shard swapped; the old tables are kept current until Complete or Revert")
	if err := workflow.Await(ctx, func() bool { return choice != "" }); err != nil {
		return err
	}
	stopStreams()
	done.Wait(ctx)
	if choice == OnlineDDLCompleteUpdate {
		return m.completeShadow(ctx)
	}
	m.phase(ctx, PhaseReverting)
	if err := m.everyShard(ctx, func(ctx workflow.Context, i int) error {
		return m.shadowStep(ctx, i, RevertShadowActivity, "swap the old table back")
	}); err != nil {
		m.check(ctx)
		return failed(err, "the revert failed for good on a shard: the schema check shows what differs")
	}
	m.phase(ctx, PhaseChecking)
	m.check(ctx)
	m.phase(ctx, PhaseReverted)
	return nil
}

// reverseStream runs StreamShadow on shard i until cancelled, again after
// each failure.
func (m *migration) reverseStream(ctx workflow.Context, i int) {
	st := &m.prog.Shards[i]
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: 365 * 24 * time.Hour,
		HeartbeatTimeout:    shadowHeartbeatTimeout,
		WaitForCancellation: true,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumInterval: 30 * time.Second},
		Summary:             "keep the old table current on " + st.Shard,
	}
	err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), StreamShadowActivity, m.shadowInput(i)).Get(ctx, nil)
	if err != nil && ctx.Err() == nil {
		m.p.step("reverse stream on %s stopped: %s", st.Shard, errText(err))
	}
}

func (m *migration) completeShadow(ctx workflow.Context) error {
	if err := m.everyShard(ctx, func(ctx workflow.Context, i int) error {
		return m.shadowStep(ctx, i, CompleteShadowActivity, "drop the old table")
	}); err != nil {
		return failed(err, "dropping the old tables")
	}
	m.phase(ctx, PhaseChecking)
	m.check(ctx)
	m.phase(ctx, PhaseDone)
	return nil
}

// cancelShadow undoes the migration on every shard, before any swap.
func (m *migration) cancelShadow(ctx workflow.Context) error {
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	err := m.everyShard(ctx, func(ctx workflow.Context, i int) error {
		return m.shadowStep(ctx, i, CancelShadowActivity, "drop the shadow table")
	})
	if err != nil {
		return failed(err, "cancelling: undoing the shadow tables")
	}
	m.phase(ctx, PhaseCancelled)
	return temporal.NewCanceledError("cancelled before any shard swapped: nothing is left of the migration")
}

// everyShard runs step on every shard at once and returns the first
// failure.
func (m *migration) everyShard(ctx workflow.Context, step func(workflow.Context, int) error) error {
	errs := make([]error, len(m.prog.Shards))
	wg := workflow.NewWaitGroup(ctx)
	for i := range m.prog.Shards {
		wg.Add(1)
		workflow.Go(ctx, func(ctx workflow.Context) {
			defer wg.Done()
			errs[i] = step(ctx, i)
		})
	}
	wg.Wait(ctx)
	var failedOn []string
	var first error
	for i, err := range errs {
		if err != nil {
			failedOn = append(failedOn, m.prog.Shards[i].Shard)
			first = errors.Join(first, err)
		}
	}
	if first != nil {
		return fmt.Errorf("on %s: %w", strings.Join(failedOn, ", "), first)
	}
	return nil
}

func (m *migration) shadowInput(i int) ShadowInput {
	return ShadowInput{MigrationID: m.migrationID, Database: m.in.Database, Shard: m.prog.Shards[i].Shard, SQL: m.in.SQL,
		Plan: m.plan, LockTimeoutMillis: m.in.LockTimeoutMillis, BufferMillis: shadowBufferMillis}
}

// shadowStep runs one shadow-path activity on shard i until it succeeds,
// waiting longer after each failure; a failure retrying cannot cure, or
// the context's end, stops it.
func (m *migration) shadowStep(ctx workflow.Context, i int, activityName, what string) error {
	st := &m.prog.Shards[i]
	wait := ddlRetryFirst
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Minute,
		HeartbeatTimeout:    shadowHeartbeatTimeout,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		// A cancelled copy must have stopped before CancelShadow drops
		// what it writes to.
		WaitForCancellation: true,
	}
	if activityName == CopyShadowActivity {
		opts.StartToCloseTimeout = shadowCopyTimeout
	}
	for {
		st.State, st.Attempts = ShardRunning, st.Attempts+1
		opts.Summary = fmt.Sprintf("%s on %s (attempt %d)", what, st.Shard, st.Attempts)
		m.p.show()
		var res ShadowResult
		err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), activityName, m.shadowInput(i)).Get(ctx, &res)
		if err == nil {
			st.State, st.LastError, st.Shadow = ShardPending, "", res.State
			st.Rows += res.Rows
			if res.LockMillis > 0 {
				st.Millis = res.LockMillis
			}
			m.p.step("%s: %s on %s (attempt %d)%s", activityName, res.State, st.Shard, st.Attempts, shadowNote(res))
			if activityName != PrepareShadowActivity {
				st.State = ShardDone
			}
			return nil
		}
		st.LastError = errText(err)
		var appErr *temporal.ApplicationError
		if ctx.Err() != nil || (errors.As(err, &appErr) && appErr.NonRetryable()) {
			st.State = ShardFailed
			m.p.step("%s on %s failed for good: %s", activityName, st.Shard, st.LastError)
			return err
		}
		st.State = ShardPending
		m.p.step("%s on %s attempt %d failed, retrying in %s: %s", activityName, st.Shard, st.Attempts, wait, st.LastError)
		if err := sleep(ctx, wait, "retry on %s", st.Shard); err != nil {
			return err
		}
		wait = min(2*wait, ddlRetryMax)
	}
}

func shadowNote(r ShadowResult) string {
	var notes []string
	if r.AlreadyDone {
		notes = append(notes, "already done")
	}
	if r.Rows > 0 {
		notes = append(notes, fmt.Sprintf("%d rows", r.Rows))
	}
	if r.LockMillis > 0 {
		notes = append(notes, fmt.Sprintf("lock held %.1f ms", r.LockMillis))
	}
	if len(r.Moved) > 0 {
		notes = append(notes, "moved "+strings.Join(r.Moved, ", "))
	}
	if len(notes) == 0 {
		return ""
	}
	return ": " + strings.Join(notes, "; ")
}
