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

// shadowContinueVersion gates continuing as new on the shadow path: a run
// whose history predates it never does, as before.
const shadowContinueVersion = "onlineddl-shadow-continue-as-new"

// The stages a migration on the shadow path continues as new at
// (OnlineDDLResume.ShadowStage).
const (
	stageCopy     = "copy"
	stageSwap     = "swap"
	stageHold     = "hold"
	stageComplete = "complete"
	stageRevert   = "revert"
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
// tables are dropped at once. A run whose history has grown long (a
// swap retried for days) continues as new at the stage it was in
// (continueShadow).
func (m *migration) shadow(ctx, planCtx workflow.Context) error {
	for _, s := range m.plan.Shards {
		m.prog.Shards = append(m.prog.Shards, ShardDDLState{Shard: s, State: ShardPending})
	}
	m.mayContinue = workflow.GetVersion(ctx, shadowContinueVersion, workflow.DefaultVersion, 1) == 1
	return m.shadowFrom(ctx, planCtx, stageCopy)
}

// resumeShadow goes on with a migration on the shadow path that continued
// as new, at its stage, on the shards that have not done it.
func (m *migration) resumeShadow(ctx, planCtx workflow.Context, stage string) error {
	m.mayContinue = workflow.GetVersion(ctx, shadowContinueVersion, workflow.DefaultVersion, 1) == 1
	m.p.step("continued as new at stage %s", stage)
	if stage == stageComplete {
		// The phase completing shows, as in the run before.
		m.phase(ctx, map[bool]string{false: PhaseSwapping, true: PhaseSwapped}[m.in.HoldForRevert])
	}
	return m.shadowFrom(ctx, planCtx, stage)
}

// shadowFrom runs the shadow path from stage on; a shard whose shadow
// state shows a step done skips it.
func (m *migration) shadowFrom(ctx, planCtx workflow.Context, stage string) error {
	if stage == stageCopy {
		m.phase(ctx, PhaseCopying)
		err := m.everyShard(planCtx, func(ctx workflow.Context, i int) error {
			switch m.prog.Shards[i].Shadow {
			case ShadowCopied:
				return nil
			case ShadowPrepared:
			default:
				if err := m.shadowStep(ctx, i, PrepareShadowActivity, "prepare the shadow table"); err != nil {
					return err
				}
			}
			return m.shadowStep(ctx, i, CopyShadowActivity, "copy into the shadow table")
		})
		if m.cancelRequested || ctx.Err() != nil {
			return m.cancelShadow(ctx)
		}
		if errors.Is(err, errContinueAsNew) {
			return m.continueShadow(ctx, stageCopy)
		}
		if err != nil {
			if cerr := m.cancelShadow(ctx); !temporal.IsCanceledError(cerr) {
				return failed(err, "preparing the shadow tables (and undoing them: %s)", errText(cerr))
			}
			return failed(err, "preparing the shadow tables; the migration was undone on every shard")
		}
		stage = stageSwap
	}
	// From here the swap may happen on some shard: the migration goes on
	// until every shard has it.
	m.started = true
	work, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		ctx.Done().Receive(ctx, nil)
		m.p.step("cancel refused: the swap has started on the shards; the migration goes on until every shard has it")
	})
	switch stage {
	case stageSwap:
		m.phase(work, PhaseSwapping)
		err := m.everyShard(work, func(ctx workflow.Context, i int) error {
			if m.prog.Shards[i].Shadow == ShadowSwapped {
				return nil
			}
			return m.shadowStep(ctx, i, SwapShadowActivity, "swap the shadow table in")
		})
		if errors.Is(err, errContinueAsNew) {
			return m.continueShadow(work, stageSwap)
		}
		if err != nil {
			m.check(work)
			return failed(err, "the swap failed for good on a shard: the schema check shows what differs")
		}
		if !m.in.HoldForRevert {
			return m.completeShadow(work)
		}
		return m.holdForRevert(work)
	case stageHold:
		return m.holdForRevert(work)
	case stageComplete:
		// A held migration's choice, made in an earlier run, still
		// refuses another (55000), as in that run.
		if m.in.HoldForRevert {
			m.choice = OnlineDDLCompleteUpdate
			if err := m.choiceHandlers(work); err != nil {
				return err
			}
		}
		return m.completeShadow(work)
	case stageRevert:
		m.choice = OnlineDDLRevertUpdate
		if err := m.choiceHandlers(work); err != nil {
			return err
		}
		return m.revertShadow(work)
	}
	return temporal.NewNonRetryableApplicationError("unknown stage "+stage+" of the shadow path", pgerr.InternalError, nil)
}

// continueShadow continues the migration as new at stage, with its plan,
// the shards' states and its migration id, once every update handler has
// finished (an accepted update is not lost).
func (m *migration) continueShadow(ctx workflow.Context, stage string) error {
	if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
		return err
	}
	m.p.step("history of %d events: continuing as new at stage %s", workflow.GetInfo(ctx).GetCurrentHistoryLength(), stage)
	next := m.in
	next.Resume = &OnlineDDLResume{MigrationID: m.migrationID, Plan: m.plan, Shards: m.prog.Shards, ShadowStage: stage}
	for i := range next.Resume.Shards {
		if st := &next.Resume.Shards[i]; st.State == ShardRunning {
			st.State = ShardPending
		}
	}
	return workflow.NewContinueAsNewError(ctx, OnlineDDLName, next)
}

// historyLong: this run may continue as new and should, its history
// near Temporal's limits. Once one shard's step has stopped for it, every
// other shard's stops at its next retry.
func (m *migration) historyLong(ctx workflow.Context) bool {
	if !m.mayContinue {
		return false
	}
	info := workflow.GetInfo(ctx)
	if info.GetContinueAsNewSuggested() || info.GetCurrentHistoryLength() > ddlHistoryLimit {
		m.continuing = true
	}
	return m.continuing
}

// choiceHandlers answers the Complete and Revert updates: the first
// accepted is the migration's choice, a later one is refused (55000).
func (m *migration) choiceHandlers(ctx workflow.Context) error {
	for _, name := range []string{OnlineDDLCompleteUpdate, OnlineDDLRevertUpdate} {
		if err := workflow.SetUpdateHandler(ctx, name, func(workflow.Context) error {
			if m.choice != "" {
				return temporal.NewNonRetryableApplicationError("already "+m.choice, pgerr.ObjectNotInPrerequisiteState, nil)
			}
			m.choice = name
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// holdForRevert runs the reverse streams until Complete or Revert. A run
// whose history has grown long stops the streams and continues as new
// here, after any update it accepted meanwhile.
func (m *migration) holdForRevert(ctx workflow.Context) error {
	m.phase(ctx, PhaseSwapped)
	if err := m.choiceHandlers(ctx); err != nil {
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
	if err := workflow.Await(ctx, func() bool { return m.choice != "" || m.historyLong(ctx) }); err != nil {
		return err
	}
	stopStreams()
	done.Wait(ctx)
	if m.choice == "" {
		if err := workflow.Await(ctx, func() bool { return workflow.AllHandlersFinished(ctx) }); err != nil {
			return err
		}
	}
	switch m.choice {
	case OnlineDDLCompleteUpdate:
		return m.completeShadow(ctx)
	case OnlineDDLRevertUpdate:
		return m.revertShadow(ctx)
	}
	return m.continueShadow(ctx, stageHold)
}

// revertShadow swaps the old tables back on every shard.
func (m *migration) revertShadow(ctx workflow.Context) error {
	m.phase(ctx, PhaseReverting)
	err := m.everyShard(ctx, func(ctx workflow.Context, i int) error {
		if m.prog.Shards[i].Shadow == ShadowReverted {
			return nil
		}
		return m.shadowStep(ctx, i, RevertShadowActivity, "swap the old table back")
	})
	if errors.Is(err, errContinueAsNew) {
		return m.continueShadow(ctx, stageRevert)
	}
	if err != nil {
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
	err := m.everyShard(ctx, func(ctx workflow.Context, i int) error {
		if m.prog.Shards[i].Shadow == ShadowCompleted {
			return nil
		}
		return m.shadowStep(ctx, i, CompleteShadowActivity, "drop the old table")
	})
	if errors.Is(err, errContinueAsNew) {
		return m.continueShadow(ctx, stageComplete)
	}
	if err != nil {
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

// everyShard runs step on every shard at once and returns their
// failures; errContinueAsNew alone when every shard that stopped did so
// to continue as new.
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
	continuing := false
	for i, err := range errs {
		switch {
		case errors.Is(err, errContinueAsNew):
			continuing = true
		case err != nil:
			failedOn = append(failedOn, m.prog.Shards[i].Shard)
			first = errors.Join(first, err)
		}
	}
	if first != nil {
		return fmt.Errorf("on %s: %w", strings.Join(failedOn, ", "), first)
	}
	if continuing {
		return errContinueAsNew
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
		if m.historyLong(ctx) {
			m.p.step("%s on %s attempt %d failed; it is retried after continuing as new: %s", activityName, st.Shard, st.Attempts, st.LastError)
			return errContinueAsNew
		}
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
