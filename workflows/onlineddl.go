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

const (
	// defaultLockTimeoutMillis is OnlineDDLInput.LockTimeoutMillis's
	// default.
	defaultLockTimeoutMillis = 1000
	// ddlRetryFirst and ddlRetryMax bound the backoff between a shard's
	// attempts: a lock not granted, a primary restarting.
	ddlRetryFirst = time.Second
	ddlRetryMax   = 30 * time.Second
	// ddlIndexBuildTimeout bounds one CREATE INDEX CONCURRENTLY attempt,
	// which heartbeats every few seconds while it builds.
	ddlIndexBuildTimeout = 24 * time.Hour
)

// ddlHistoryLimit: past this many events (a shard retried for hours) a
// migration continues as new, well before Temporal's 50k-event limit; on
// the shadow path also when Temporal suggests it.
const ddlHistoryLimit = 10000

// errContinueAsNew stops a shard's retries so that the run can continue
// as new.
var errContinueAsNew = errors.New("continuing as new")

// OnlineDDL runs one schema change on every shard that holds its table.
// PlanOnlineDDL classifies the statement (package ddl) and finds the
// shards; a statement for the shadow-table path runs on it (see shadow), or
// ends with 0A000
// in a run that predates the shadow path (see shadow), a refused one with
// the refusal. A direct one
// runs first on the first shard (the authoritative one): a statement
// Postgres rejects fails there, with no shard changed. Then it runs on
// the others at once. Each shard's attempt (ApplyDDL) holds a short
// lock_timeout and is retried with backoff until it succeeds, so the
// cluster converges (continuing as new past ddlHistoryLimit events, on
// either path, with its state: OnlineDDLResume);
// ApplyDDL is idempotent. A schema check of the database ends the run.
// Queries: OnlineDDLProgressQuery,
// SchemaCheckQuery, StepQuery. The Cancel update stops a migration only
// before any shard ran it; so does cancelling the workflow, which later
// is noted and ignored.
func OnlineDDL(ctx workflow.Context, in OnlineDDLInput) (OnlineDDLResult, error) {
	p, err := track(ctx)
	if err != nil {
		return OnlineDDLResult{}, err
	}
	if in.LockTimeoutMillis <= 0 {
		in.LockTimeoutMillis = defaultLockTimeoutMillis
	}
	m := &migration{in: in, p: p, prog: OnlineDDLProgress{Phase: PhaseClassifying, Shards: []ShardDDLState{}}}
	p.details = func(step string) string { return onlineDDLDetails(m.in, m.prog, step) }
	planCtx, cancelPlan := workflow.WithCancel(ctx)
	if err := m.handlers(ctx, cancelPlan); err != nil {
		return OnlineDDLResult{}, err
	}
	if r := in.Resume; r != nil {
		m.migrationID, m.plan, m.prog.Plan, m.prog.Shards = r.MigrationID, r.Plan, &m.plan, r.Shards
		if r.ShadowStage != "" {
			err = m.resumeShadow(ctx, planCtx, r.ShadowStage)
		} else {
			err = m.resume(ctx)
		}
	} else {
		m.migrationID = workflow.GetInfo(ctx).WorkflowExecution.ID + "/" + workflow.GetInfo(ctx).WorkflowExecution.RunID
		m.phase(ctx, PhaseClassifying)
		err = m.run(ctx, planCtx)
	}
	if workflow.IsContinueAsNewError(err) {
		return OnlineDDLResult{}, err
	}
	if err != nil {
		m.prog.Error = errText(err)
		if m.prog.Phase != PhaseCancelled {
			m.phase(ctx, PhaseFailed)
		}
	}
	return OnlineDDLResult{OnlineDDLProgress: m.prog, Steps: p.steps}, err
}

type migration struct {
	// migrationID names the migration in each shard's record of it: the
	// first run's workflow id and run id.
	migrationID string
	in          OnlineDDLInput
	p           *progress
	prog        OnlineDDLProgress
	plan        OnlineDDLPlan
	// started: some shard may have run the statement, so it cannot be
	// cancelled any more.
	started         bool
	cancelRequested bool
	// mayContinue: this run of the shadow path may continue as new (its
	// history is not older than that); continuing: it is about to.
	mayContinue, continuing bool
	// choice is the Complete or Revert update a held migration accepted.
	choice string
}

func (m *migration) handlers(ctx workflow.Context, cancelPlan workflow.CancelFunc) error {
	if err := workflow.SetQueryHandler(ctx, OnlineDDLProgressQuery, func() (OnlineDDLProgress, error) { return m.prog, nil }); err != nil {
		return err
	}
	if err := workflow.SetQueryHandler(ctx, SchemaCheckQuery, func() (*SchemaCheckResult, error) { return m.prog.SchemaCheck, nil }); err != nil {
		return err
	}
	return workflow.SetUpdateHandlerWithOptions(ctx, OnlineDDLCancelUpdate,
		func(workflow.Context) error {
			// The run may have gone on between the validator and here.
			if err := m.canCancel(); err != nil {
				return err
			}
			m.cancelRequested = true
			m.p.step("cancel requested before any shard ran the statement")
			cancelPlan()
			return nil
		},
		workflow.UpdateHandlerOptions{Validator: m.canCancel})
}

// canCancel refuses a cancel once a shard may have run the statement:
// undoing it there is not possible in general (a dropped column is gone),
// so the migration goes on until every shard has it.
func (m *migration) canCancel() error {
	if m.started {
		return temporal.NewNonRetryableApplicationError(
			"cancel refused: the statement has started on the shards, and the migration goes on until every shard has it (the cluster converges)",
			pgerr.ObjectNotInPrerequisiteState, nil)
	}
	if m.prog.Phase == PhaseFailed || m.prog.Phase == PhaseCancelled {
		return temporal.NewNonRetryableApplicationError("the migration has ended ("+m.prog.Phase+")", pgerr.ObjectNotInPrerequisiteState, nil)
	}
	return nil
}

func (m *migration) phase(ctx workflow.Context, name string) {
	m.prog.Phase = name
	upsertPhase(ctx, name)
	m.p.step("phase %s", name)
}

func (m *migration) run(ctx, planCtx workflow.Context) error {
	if err := m.classify(planCtx); err != nil {
		if m.cancelRequested || ctx.Err() != nil {
			return m.cancelled(ctx)
		}
		return err
	}
	if m.cancelRequested || ctx.Err() != nil {
		return m.cancelled(ctx)
	}
	if m.plan.Path == PathShadow {
		return m.shadow(ctx, planCtx)
	}
	return m.apply(ctx)
}

// resume goes on with a migration that continued as new: the shards not
// done yet.
func (m *migration) resume(ctx workflow.Context) error {
	m.p.step("continued as new: %d shards to go", m.pending())
	return m.apply(ctx)
}

func (m *migration) pending() int {
	n := 0
	for _, s := range m.prog.Shards {
		if s.State != ShardDone {
			n++
		}
	}
	return n
}

// apply runs the statement on the shards, then the schema check.
func (m *migration) apply(ctx workflow.Context) error {
	m.started = true
	// From here on the shards' work must not stop half-way: a cancelled
	// workflow goes on in a disconnected context.
	work, _ := workflow.NewDisconnectedContext(ctx)
	workflow.Go(ctx, func(ctx workflow.Context) {
		ctx.Done().Receive(ctx, nil)
		m.p.step("cancel refused: the statement has started on the shards; the migration goes on until every shard has it")
	})
	m.phase(work, PhaseApplying)
	err := m.applyEverywhere(work)
	if errors.Is(err, errContinueAsNew) {
		next := m.in
		next.Resume = &OnlineDDLResume{MigrationID: m.migrationID, Plan: m.plan, Shards: m.prog.Shards}
		for i := range next.Resume.Shards {
			if st := &next.Resume.Shards[i]; st.State == ShardRunning {
				st.State = ShardPending
			}
		}
		return workflow.NewContinueAsNewError(work, OnlineDDLName, next)
	}
	if err != nil {
		return err
	}
	m.phase(work, PhaseChecking)
	m.check(work)
	m.phase(work, PhaseDone)
	return nil
}

func (m *migration) cancelled(ctx workflow.Context) error {
	ctx, _ = workflow.NewDisconnectedContext(ctx)
	m.phase(ctx, PhaseCancelled)
	return temporal.NewCanceledError("cancelled before any shard ran the statement: nothing changed")
}

// classify runs PlanOnlineDDL and refuses what the direct path cannot do.
func (m *migration) classify(ctx workflow.Context) error {
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: 2 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
		Summary:             "classify and find the shards: " + m.in.SQL,
	}
	in := PlanOnlineDDLInput{WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Input: m.in}
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), PlanOnlineDDLActivity, in).Get(ctx, &m.plan); err != nil {
		return failed(err, "planning the migration")
	}
	m.prog.Plan = &m.plan
	m.p.step("%s path: %s", m.plan.Path, m.plan.Reason)
	switch m.plan.Path {
	case PathDirect:
	case PathShadow:
		if !shadowPlanned(ctx) {
			m.p.step("shards holding %s: %s", m.object(), strings.Join(m.plan.Shards, ", "))
			return nil
		}
		return temporal.NewNonRetryableApplicationError(
			"planned: the shadow-table path is not built yet; this statement needs it because "+m.plan.Reason,
			pgerr.FeatureNotSupported, nil)
	default:
		return temporal.NewNonRetryableApplicationError("refused: "+m.plan.Reason, pgerr.FeatureNotSupported, nil)
	}
	for _, s := range m.plan.Shards {
		m.prog.Shards = append(m.prog.Shards, ShardDDLState{Shard: s, State: ShardPending})
	}
	m.p.step("shards holding %s: %s", m.object(), strings.Join(m.plan.Shards, ", "))
	return nil
}

func (m *migration) object() string {
	if m.plan.Table != "" {
		return m.plan.Schema + "." + m.plan.Table
	}
	return "index " + m.plan.Schema + "." + m.plan.Index
}

// applyEverywhere runs the statement on the first shard, then on the rest
// at once, each until it succeeds or fails for good.
func (m *migration) applyEverywhere(ctx workflow.Context) error {
	if len(m.prog.Shards) == 0 {
		return nil
	}
	if m.prog.Shards[0].State != ShardDone {
		if err := m.applyShard(ctx, 0); errors.Is(err, errContinueAsNew) {
			return err
		} else if err != nil {
			return failed(err, "shard %s refused the statement; no shard has changed", m.prog.Shards[0].Shard)
		}
	}
	errs := make([]error, len(m.prog.Shards))
	wg := workflow.NewWaitGroup(ctx)
	for i := 1; i < len(m.prog.Shards); i++ {
		if m.prog.Shards[i].State == ShardDone {
			continue
		}
		wg.Add(1)
		workflow.Go(ctx, func(ctx workflow.Context) {
			defer wg.Done()
			errs[i] = m.applyShard(ctx, i)
		})
	}
	wg.Wait(ctx)
	var failedOn []string
	var first error
	for i, err := range errs {
		if errors.Is(err, errContinueAsNew) {
			return err
		}
		if err != nil {
			failedOn = append(failedOn, m.prog.Shards[i].Shard)
			if first == nil {
				first = err
			}
		}
	}
	if first != nil {
		m.check(ctx)
		return failed(first, "the statement failed for good on %s after the other shards ran it: the schema check shows what differs", strings.Join(failedOn, ", "))
	}
	return nil
}

// applyShard runs ApplyDDL on shard i until it succeeds, waiting longer
// after each failure; a failure retrying cannot cure ends it.
func (m *migration) applyShard(ctx workflow.Context, i int) error {
	st := &m.prog.Shards[i]
	wait := ddlRetryFirst
	for {
		st.State, st.Attempts = ShardRunning, st.Attempts+1
		m.p.show()
		var res ApplyDDLResult
		err := workflow.ExecuteActivity(m.applyCtx(ctx, st), ApplyDDLActivity, ApplyDDLInput{
			MigrationID: m.migrationID, Database: m.in.Database, Shard: st.Shard, SQL: m.in.SQL, Plan: m.plan,
			LockTimeoutMillis: m.in.LockTimeoutMillis,
		}).Get(ctx, &res)
		if err == nil {
			st.State, st.LastError, st.Millis = ShardDone, "", res.Millis
			st.AlreadyApplied, st.DroppedInvalidIndex = res.AlreadyApplied, res.DroppedInvalidIndex
			m.p.step("shard %s done in %.1f ms (attempt %d)", st.Shard, res.Millis, st.Attempts)
			return nil
		}
		st.LastError = errText(err)
		var appErr *temporal.ApplicationError
		if errors.As(err, &appErr) && appErr.NonRetryable() {
			st.State = ShardFailed
			m.p.step("shard %s failed for good: %s", st.Shard, st.LastError)
			return err
		}
		st.State = ShardPending
		if workflow.GetInfo(ctx).GetCurrentHistoryLength() > ddlHistoryLimit {
			return errContinueAsNew
		}
		m.p.step("shard %s attempt %d failed, retrying in %s: %s", st.Shard, st.Attempts, wait, st.LastError)
		if err := sleep(ctx, wait, "retry on %s", st.Shard); err != nil {
			return err
		}
		wait = min(2*wait, ddlRetryMax)
	}
}

// applyCtx gives one ApplyDDL attempt: the workflow retries, so that the
// progress query sees every attempt and its error.
func (m *migration) applyCtx(ctx workflow.Context, st *ShardDDLState) workflow.Context {
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 1},
		Summary:             fmt.Sprintf("%s on %s (attempt %d)", m.plan.Execution, st.Shard, st.Attempts),
	}
	if m.plan.Execution == "create_index_concurrently" {
		opts.StartToCloseTimeout, opts.HeartbeatTimeout = ddlIndexBuildTimeout, time.Minute
	}
	return workflow.WithActivityOptions(ctx, opts)
}

// check runs the schema check over the plan's shards. Its failure is
// noted, not returned: the change itself is done.
func (m *migration) check(ctx workflow.Context) {
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 5},
		Summary:             "schema check of " + m.in.Database,
	}
	var res SchemaCheckResult
	in := SchemaCheckInput{Database: m.in.Database, Shards: m.plan.Shards}
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), CheckSchemaActivity, in).Get(ctx, &res); err != nil {
		m.p.step("schema check failed: %s", errText(err))
		return
	}
	m.prog.SchemaCheck = &res
	m.p.step("schema check: %d tables on %d shards, %d differences", res.Tables, len(res.Shards), len(res.Differences))
}

// SchemaCheck reports the tables of a database whose definition differs
// between the shards that hold them (one CheckSchema activity).
func SchemaCheck(ctx workflow.Context, in SchemaCheckInput) (SchemaCheckResult, error) {
	opts := workflow.ActivityOptions{
		StartToCloseTimeout: 5 * time.Minute,
		RetryPolicy:         &temporal.RetryPolicy{InitialInterval: time.Second, MaximumAttempts: 3},
		Summary:             "schema check of " + in.Database,
	}
	var res SchemaCheckResult
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, opts), CheckSchemaActivity, in).Get(ctx, &res); err != nil {
		return res, failed(err, "checking the schema of %s", in.Database)
	}
	return res, nil
}
