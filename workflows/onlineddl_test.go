package workflows

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/pgerr"
)

// fakeDDLCluster stands in for OnlineDDL's activities (tested on real
// Postgres in package onlineddl): each shard has a schema version, which
// ApplyDDL moves to 1 unless the shard's lock is held or it refuses.
type fakeDDLCluster struct {
	mu      sync.Mutex
	plan    OnlineDDLPlan
	version map[string]int
	// lockHeld: that many attempts on a shard find its lock held (55P03).
	lockHeld map[string]int
	// refuse: ApplyDDL fails for good on these shards.
	refuse map[string]bool
	calls  []string
	// planned is closed when PlanOnlineDDL is called; planWait, when set,
	// holds PlanOnlineDDL until it is closed or the activity cancelled.
	planWait chan struct{}
	// migrationIDs counts s2's attempts by migration id.
	migrationIDs map[string]int
}

func (f *fakeDDLCluster) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func newOnlineDDLEnv(t *testing.T, f *fakeDDLCluster) *testsuite.TestWorkflowEnvironment {
	f.version, f.migrationIDs = map[string]int{}, map[string]int{}
	return newOnlineDDLEnvKeeping(t, f)
}

// newOnlineDDLEnvKeeping is newOnlineDDLEnv on shards as f left them.
func newOnlineDDLEnvKeeping(t *testing.T, f *fakeDDLCluster) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(OnlineDDL, workflow.RegisterOptions{Name: OnlineDDLName})
	reg := func(name string, fn any) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(PlanOnlineDDLActivity, func(ctx context.Context, in PlanOnlineDDLInput) (OnlineDDLPlan, error) {
		f.record("plan")
		if in.WorkflowID == "" || in.Input.Database != "store" {
			return OnlineDDLPlan{}, errors.New("bad plan input")
		}
		if f.planWait != nil {
			select {
			case <-f.planWait:
			case <-ctx.Done():
				return OnlineDDLPlan{}, ctx.Err()
			}
		}
		return f.plan, nil
	})
	reg(ApplyDDLActivity, func(ctx context.Context, in ApplyDDLInput) (ApplyDDLResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls = append(f.calls, "apply "+in.Shard)
		if in.Shard == "s2" {
			f.migrationIDs[in.MigrationID]++
		}
		if in.LockTimeoutMillis != 1000 || in.MigrationID == "" {
			return ApplyDDLResult{}, temporal.NewNonRetryableApplicationError("bad apply input", pgerr.InternalError, nil)
		}
		if f.refuse[in.Shard] {
			return ApplyDDLResult{}, temporal.NewNonRetryableApplicationError(`column "qty" of relation "orders" already exists`, "42701", nil)
		}
		if f.lockHeld[in.Shard] > 0 {
			f.lockHeld[in.Shard]--
			return ApplyDDLResult{}, temporal.NewApplicationError("canceling statement due to lock timeout", "55P03")
		}
		f.version[in.Shard] = 1
		return ApplyDDLResult{Millis: 3}, nil
	})
	reg(CheckSchemaActivity, func(ctx context.Context, in SchemaCheckInput) (SchemaCheckResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls = append(f.calls, "check")
		res := SchemaCheckResult{Database: in.Database, Shards: in.Shards, Tables: 1, Differences: []SchemaDifference{}}
		for _, s := range in.Shards[1:] {
			if f.version[s] != f.version[in.Shards[0]] {
				res.Differences = append(res.Differences, SchemaDifference{Table: "public.orders", Shard: s, Reference: in.Shards[0], What: "column qty missing"})
			}
		}
		return res, nil
	})
	return env
}

var directPlan = OnlineDDLPlan{
	Path: PathDirect, Reason: "ADD COLUMN qty with a constant or NULL default is a catalog change", Execution: "transaction",
	Schema: "public", Table: "orders", Shards: []string{"s0", "s1", "s2"},
}

var ddlIn = OnlineDDLInput{Database: "store", SQL: "ALTER TABLE orders ADD COLUMN qty int NOT NULL DEFAULT 0"}

func TestOnlineDDLRetriesUntilEveryShardHasIt(t *testing.T) {
	f := &fakeDDLCluster{plan: directPlan, lockHeld: map[string]int{"s2": 3}}
	env := newOnlineDDLEnv(t, f)
	var during OnlineDDLProgress
	var cancelErr error
	// While s2 waits between attempts, s0 and s1 are done: a cancel is
	// refused.
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(OnlineDDLProgressQuery)
		if err == nil {
			err = v.Get(&during)
		}
		if err != nil {
			t.Error(err)
		}
		env.UpdateWorkflow(OnlineDDLCancelUpdate, "cancel-1", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { cancelErr = err },
			OnAccept:   func() { t.Error("a cancel was accepted after shards ran the statement") },
			OnComplete: func(any, error) {},
		})
	}, 1500*time.Millisecond)
	env.ExecuteWorkflow(OnlineDDL, ddlIn)
	if !env.IsWorkflowCompleted() {
		t.Fatal("the workflow did not complete")
	}
	var res OnlineDDLResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Phase != PhaseDone {
		t.Errorf("phase %s, want done", res.Phase)
	}
	for _, s := range []string{"s0", "s1", "s2"} {
		if f.version[s] != 1 {
			t.Errorf("shard %s has version %d", s, f.version[s])
		}
	}
	if f.calls[0] != "plan" || f.calls[1] != "apply s0" {
		t.Errorf("calls %v: the first shard must run alone first", f.calls)
	}
	want := map[string]int{"s0": 1, "s1": 1, "s2": 4}
	for _, st := range res.Shards {
		if st.State != ShardDone || st.Attempts != want[st.Shard] {
			t.Errorf("shard %s: %s after %d attempts, want done after %d", st.Shard, st.State, st.Attempts, want[st.Shard])
		}
	}
	if res.SchemaCheck == nil || len(res.SchemaCheck.Differences) != 0 {
		t.Errorf("schema check %+v, want no differences", res.SchemaCheck)
	}
	if cancelErr == nil || !strings.Contains(cancelErr.Error(), "cancel refused") {
		t.Errorf("cancel after the start: %v, want refused", cancelErr)
	}
	if during.Phase != PhaseApplying || len(during.Shards) != 3 {
		t.Fatalf("progress during the run: %+v", during)
	}
	if s2 := during.Shards[2]; s2.State != ShardPending || s2.Attempts < 1 || !strings.Contains(s2.LastError, "lock timeout") {
		t.Errorf("s2 between attempts: %+v, want pending with the lock timeout as last error", s2)
	}
}

func TestOnlineDDLShadowPathIsPlannedInAnOlderRun(t *testing.T) {
	plan := directPlan
	plan.Path, plan.Reason = PathShadow, "ALTER COLUMN id TYPE bigint rewrites the table"
	f := &fakeDDLCluster{plan: plan}
	env := newOnlineDDLEnv(t, f)
	// A run that predates the shadow path (its history has no version
	// marker) still refuses the statement.
	env.OnGetVersion(shadowVersion, workflow.DefaultVersion, 1).Return(workflow.DefaultVersion)
	env.ExecuteWorkflow(OnlineDDL, OnlineDDLInput{Database: "store", SQL: "ALTER TABLE orders ALTER COLUMN id TYPE bigint"})
	err := env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != pgerr.FeatureNotSupported || !strings.Contains(err.Error(), "planned: the shadow-table path") {
		t.Fatalf("error %v, want 0A000 planned: the shadow-table path", err)
	}
	if len(f.calls) != 1 {
		t.Errorf("calls %v: nothing but the plan may run", f.calls)
	}
}

func TestOnlineDDLFirstShardRefusalChangesNothing(t *testing.T) {
	f := &fakeDDLCluster{plan: directPlan, refuse: map[string]bool{"s0": true}}
	env := newOnlineDDLEnv(t, f)
	env.ExecuteWorkflow(OnlineDDL, ddlIn)
	err := env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != "42701" || !strings.Contains(err.Error(), "no shard has changed") {
		t.Fatalf("error %v, want 42701 with no shard changed", err)
	}
	for _, c := range f.calls {
		if c == "apply s1" || c == "apply s2" {
			t.Errorf("calls %v: the other shards ran after the first refused", f.calls)
		}
	}
}

func TestOnlineDDLCancelBeforeAnyShard(t *testing.T) {
	f := &fakeDDLCluster{plan: directPlan, planWait: make(chan struct{})}
	env := newOnlineDDLEnv(t, f)
	accepted := false
	env.RegisterDelayedCallback(func() {
		env.UpdateWorkflow(OnlineDDLCancelUpdate, "cancel-1", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { t.Errorf("cancel before any shard refused: %v", err) },
			OnAccept:   func() { accepted = true },
			OnComplete: func(any, error) {},
		})
	}, time.Second)
	env.ExecuteWorkflow(OnlineDDL, ddlIn)
	close(f.planWait)
	err := env.GetWorkflowError()
	var canceled *temporal.CanceledError
	if !accepted || !errors.As(err, &canceled) {
		t.Fatalf("accepted %v, error %v: want the run cancelled", accepted, err)
	}
	// The cancelled plan activity may still be recording its call.
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, c := range f.calls {
		if strings.HasPrefix(c, "apply") {
			t.Errorf("calls %v: a shard ran a cancelled migration", f.calls)
		}
	}
}

func TestOnlineDDLLaterShardRefusalIsReported(t *testing.T) {
	f := &fakeDDLCluster{plan: directPlan, refuse: map[string]bool{"s2": true}}
	env := newOnlineDDLEnv(t, f)
	env.ExecuteWorkflow(OnlineDDL, ddlIn)
	err := env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != "42701" || !strings.Contains(err.Error(), "failed for good on s2") {
		t.Fatalf("error %v, want 42701 naming s2", err)
	}
	v, qerr := env.QueryWorkflow(OnlineDDLProgressQuery)
	var p OnlineDDLProgress
	if qerr == nil {
		qerr = v.Get(&p)
	}
	if qerr != nil {
		t.Fatal(qerr)
	}
	states := map[string]string{}
	for _, s := range p.Shards {
		states[s.Shard] = s.State
	}
	if states["s0"] != ShardDone || states["s1"] != ShardDone || states["s2"] != ShardFailed || p.Phase != PhaseFailed {
		t.Errorf("phase %s, states %v: want s2 failed, the others done", p.Phase, states)
	}
	if c := p.SchemaCheck; c == nil || len(c.Differences) != 1 || c.Differences[0].Shard != "s2" {
		t.Errorf("schema check %+v: want the difference on s2", p.SchemaCheck)
	}
}

func TestOnlineDDLDetailsShowEveryShard(t *testing.T) {
	p := OnlineDDLProgress{Phase: PhaseApplying, Plan: &directPlan, Shards: []ShardDDLState{
		{Shard: "s0", State: ShardDone, Attempts: 1},
		{Shard: "s2", State: ShardPending, Attempts: 2, LastError: "canceling statement due to lock timeout"},
	}}
	d := onlineDDLDetails(ddlIn, p, "shard s2 attempt 2 failed")
	for _, want := range []string{
		"**OnlineDDL on store**: applying",
		ddlIn.SQL,
		"- path: direct (",
		"| s0 | done | 1 |  |",
		"| s2 | pending | 2 | canceling statement due to lock timeout |",
	} {
		if !strings.Contains(d, want) {
			t.Errorf("details lack %q:\n%s", want, d)
		}
	}
}

func TestOnlineDDLContinuesAsNewWhileAShardIsRetried(t *testing.T) {
	f := &fakeDDLCluster{plan: directPlan, lockHeld: map[string]int{"s2": 12}}
	env := newOnlineDDLEnv(t, f)
	var firstID string
	// A few attempts on s2 later, the history is long.
	env.RegisterDelayedCallback(func() { env.SetCurrentHistoryLength(ddlHistoryLimit + 1) }, 5*time.Second)
	env.ExecuteWorkflow(OnlineDDL, ddlIn)
	var can *workflow.ContinueAsNewError
	if err := env.GetWorkflowError(); !errors.As(err, &can) {
		t.Fatalf("error %v, want a continue-as-new", err)
	}
	var next OnlineDDLInput
	if err := converter.GetDefaultDataConverter().FromPayloads(can.Input, &next); err != nil {
		t.Fatal(err)
	}
	r := next.Resume
	if r == nil || r.MigrationID == "" || r.Plan.Path != PathDirect || len(r.Shards) != 3 {
		t.Fatalf("resume %+v", r)
	}
	firstID = r.MigrationID
	if r.Shards[0].State != ShardDone || r.Shards[1].State != ShardDone || r.Shards[2].State != ShardPending || r.Shards[2].Attempts < 2 {
		t.Fatalf("shards carried over: %+v", r.Shards)
	}
	f.calls = nil
	env = newOnlineDDLEnvKeeping(t, f)
	env.ExecuteWorkflow(OnlineDDL, next)
	var res OnlineDDLResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Phase != PhaseDone || res.Shards[2].State != ShardDone || res.Shards[2].Attempts != 13 {
		t.Errorf("after continuing: %+v", res.OnlineDDLProgress)
	}
	for _, c := range f.calls {
		if c == "plan" || c == "apply s0" || c == "apply s1" {
			t.Errorf("calls %v: the continued run planned again or ran a done shard", f.calls)
		}
	}
	if f.migrationIDs[firstID] != 13 {
		t.Errorf("s2's attempts under the first run's migration id: %d of 13 (%v)", f.migrationIDs[firstID], f.migrationIDs)
	}
}
