package workflows

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	sdkpb "go.temporal.io/api/sdk/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/pgerr"
)

// fakeReplicator stands in for the Replicator's activities (tested on
// real Postgres in package replicator/actions): it records the calls and
// keeps the state a real source would (a slot per source while the
// reshard lives).
type fakeReplicator struct {
	mu        sync.Mutex
	calls     []string
	slots     map[string]bool
	streaming map[string]bool
	// cancelled holds the ids of stream activities cancelled: the test
	// environment may report a cancel before the activity's start.
	cancelled map[string]bool
	lag       int64
	planErr   error
	// copyBlocks makes CopyTables wait for cancellation; diffBlocks
	// DiffTables, past the first diff.
	copyBlocks, diffBlocks bool
	diffs                  int
	whileDiffBlocks        func()
	// fenceErr fails FenceSources; fenced says whether a fence is up.
	fenceErr error
	// lagging names routers WaitRouters reports behind the revision.
	lagging  []string
	fenced   bool
	buffered bool
	// streamsEndAt: when running streams reach a fence's marker.
	streamsEndAt []time.Time
	// generations: each started stream's fence generation.
	generations []int
	// queues is the plan's ReshardPlan.Queues; ranOn records the task
	// queue each "copy <source>" and "stream <source>" was scheduled on.
	queues map[string]string
	ranOn  map[string][]string
	// opConflict, when set, answers BeginOperation (the cutover's
	// records on its shards).
	opConflict func(activities.OperationInput) error
	// streamErr, when set, is what streams that end by themselves
	// return, until ResetMovement; copyTerms records the term of s1 each
	// copy's plan holds.
	streamErr error
	// stickyStreamErr: ResetMovement leaves streamErr.
	stickyStreamErr bool
	copyTerms       []int64
}

func (f *fakeReplicator) record(call string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, call)
}

func (f *fakeReplicator) called(prefix string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if len(c) >= len(prefix) && c[:len(prefix)] == prefix {
			n++
		}
	}
	return n
}

var testPlan = ReshardPlan{
	Key: "rs0011223344556677", Database: "store", ShardGroup: "customer_data",
	Sources: []string{"s1", "s2"}, Targets: []string{"t1", "t2", "t3", "t4"},
	Tables:        []ReshardTable{{Schema: "public", Name: "customers", ShardColumn: "customer_id"}, {Schema: "public", Name: "orders", ShardColumn: "customer_id"}},
	RowsEstimated: map[string]map[string]int64{"s1": {"public.customers": 10, "public.orders": 90}, "s2": {"public.customers": 10, "public.orders": 90}},
}

func newReshardEnv(t *testing.T, f *fakeReplicator) *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(Reshard, workflow.RegisterOptions{Name: ReshardName})
	f.slots, f.streaming, f.ranOn = map[string]bool{}, map[string]bool{}, map[string][]string{}
	reg := func(name string, fn any) { env.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name}) }
	reg(PlanReshardActivity, func(ctx context.Context, in PlanReshardInput) (ReshardPlan, error) {
		f.record("plan")
		if f.planErr != nil {
			return ReshardPlan{}, f.planErr
		}
		if in.WorkflowID == "" || in.Input.ShardGroup != "customer_data" {
			return ReshardPlan{}, errors.New("bad plan input")
		}
		plan := testPlan
		plan.Queues = f.queues
		return plan, nil
	})
	reg(CopyTablesActivity, func(ctx context.Context, in SourceInput) (CopyTablesResult, error) {
		f.record("copy " + in.Source)
		f.mu.Lock()
		if in.Source == "s1" {
			f.copyTerms = append(f.copyTerms, in.Plan.Terms["s1"])
		}
		f.ranOn["copy "+in.Source] = append(f.ranOn["copy "+in.Source], activity.GetInfo(ctx).TaskQueue)
		f.slots[in.Source] = true
		f.mu.Unlock()
		if f.copyBlocks {
			<-ctx.Done()
			return CopyTablesResult{}, ctx.Err()
		}
		return CopyTablesResult{Source: in.Source, Rows: map[string]int64{"public.customers": 10, "public.orders": 100}}, nil
	})
	// A stream runs until cancelled. It is mocked to wait on the
	// workflow clock, which a running activity would stop: the catch-up
	// and ready phases sleep beside the streams.
	reg(StreamChangesActivity, func(ctx context.Context, in SourceInput) error { return nil })
	reg(StreamLagActivity, func(ctx context.Context, p ReshardPlan) (StreamLagResult, error) {
		f.record("lag")
		f.mu.Lock()
		defer f.mu.Unlock()
		var res StreamLagResult
		for _, s := range p.Sources {
			res.Sources = append(res.Sources, LagSample{Source: s, LagBytes: f.lag, LagSeconds: float64(f.lag) / (1 << 20)})
		}
		// Each sample finds the streams closer.
		f.lag /= 4
		return res, nil
	})
	reg(DiffTablesActivity, func(ctx context.Context, p ReshardPlan) (DiffTablesResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, s := range p.Sources {
			if f.streaming[s] {
				return DiffTablesResult{}, errors.New("diff while stream " + s + " runs")
			}
		}
		f.calls = append(f.calls, "diff "+strings.Join(p.Sources, ","))
		f.diffs++
		if f.diffBlocks && f.diffs > 1 {
			f.mu.Unlock()
			if f.whileDiffBlocks != nil {
				// The workflow clock stands still while the activity runs.
				f.whileDiffBlocks()
			}
			<-ctx.Done()
			f.mu.Lock()
			return DiffTablesResult{}, ctx.Err()
		}
		return DiffTablesResult{Done: true, Reports: map[string]json.RawMessage{"public.orders": json.RawMessage(`{"done":true}`)}}, nil
	})
	reg(CleanupReshardActivity, func(ctx context.Context, p ReshardPlan) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, s := range p.Sources {
			if f.streaming[s] {
				return errors.New("cleanup while stream " + s + " runs")
			}
		}
		f.calls = append(f.calls, "cleanup")
		f.slots = map[string]bool{}
		return nil
	})
	reg("BeginOperation", func(ctx context.Context, in activities.OperationInput) error {
		f.mu.Lock()
		defer f.mu.Unlock()
		f.calls = append(f.calls, "begin "+in.Kind)
		if f.opConflict != nil {
			return f.opConflict(in)
		}
		return nil
	})
	reg("EndOperation", func(ctx context.Context, in activities.OperationInput) error {
		f.record("end " + in.Kind)
		return nil
	})
	reg(ResetMovementActivity, func(ctx context.Context, p ReshardPlan) (ResetMovementResult, error) {
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, s := range p.Sources {
			if f.streaming[s] {
				return ResetMovementResult{}, errors.New("reset while stream " + s + " runs")
			}
		}
		f.calls, f.slots = append(f.calls, "reset"), map[string]bool{}
		if !f.stickyStreamErr {
			f.streamErr = nil
		}
		return ResetMovementResult{Terms: map[string]int64{"s1": 2, "s2": 1}}, nil
	})
	registerFakeCutover(t, env, f, reg)
	registerFakeMoveTables(env, f)
	// A stream ends by itself only once its source is fenced (it has
	// applied the fence's marker): at the next of f.streamsEndAt, and
	// only if the fence is up by then.
	streamRuns := func() time.Duration {
		for _, at := range f.streamsEndAt {
			if d := at.Sub(env.Now()); d > 0 {
				return d
			}
		}
		return 1000 * time.Hour
	}
	for range 2 {
		env.OnActivity(StreamChangesActivity, mock.Anything, mock.Anything).AfterFn(streamRuns).
			Return(func(ctx context.Context, in SourceInput) error {
				f.mu.Lock()
				defer f.mu.Unlock()
				if f.fenced {
					delete(f.streaming, in.Source)
					return nil
				}
				if f.streamErr != nil {
					delete(f.streaming, in.Source)
					return f.streamErr
				}
				return errors.New("a stream ended by itself")
			})
	}
	env.SetOnActivityStartedListener(func(info *activity.Info, ctx context.Context, args converter.EncodedValues) {
		if info.ActivityType.Name != StreamChangesActivity {
			return
		}
		var in SourceInput
		if err := args.Get(&in); err != nil {
			t.Error(err)
		}
		f.record("stream " + in.Source)
		f.mu.Lock()
		f.ranOn["stream "+in.Source] = append(f.ranOn["stream "+in.Source], info.TaskQueue)
		if !f.cancelled[info.ActivityID] {
			f.streaming[in.Source] = true
		}
		f.generations = append(f.generations, in.FenceGeneration)
		f.mu.Unlock()
	})
	env.SetOnActivityCanceledListener(func(info *activity.Info) {
		f.mu.Lock()
		defer f.mu.Unlock()
		// The listener does not say which source: the workflow stops
		// every stream at once.
		if info.ActivityType.Name == StreamChangesActivity {
			f.streaming = map[string]bool{}
			if f.cancelled == nil {
				f.cancelled = map[string]bool{}
			}
			f.cancelled[info.ActivityID] = true
		}
	})
	return env
}

var reshardIn = ReshardInput{Database: "store", ShardGroup: "customer_data",
	TargetKeyRanges: []KeyRangeInput{{ShardUID: "t1", End: "40"}, {ShardUID: "t2", Start: "40"}}}

func queryProgress(t *testing.T, env *testsuite.TestWorkflowEnvironment) ReshardProgress {
	t.Helper()
	v, err := env.QueryWorkflow(ProgressQuery)
	if err != nil {
		t.Fatal(err)
	}
	var p ReshardProgress
	if err := v.Get(&p); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReshardRunsToCutoverThenCancelCleansUp(t *testing.T) {
	f := &fakeReplicator{lag: 50 << 20}
	env := newReshardEnv(t, f)
	var atReady ReshardProgress
	var switchErr error
	env.RegisterDelayedCallback(func() {
		atReady = queryProgress(t, env)
		if v, err := env.QueryWorkflow("__temporal_workflow_metadata"); err != nil {
			t.Error(err)
		} else {
			var md sdkpb.WorkflowMetadata
			if err := v.Get(&md); err != nil || !strings.Contains(md.GetCurrentDetails(), "**Reshard store.customer_data**: ready_for_cutover") || !strings.Contains(md.GetCurrentDetails(), "rows copied: 220") {
				t.Errorf("current details %q, %v", md.GetCurrentDetails(), err)
			}
		}
		env.UpdateWorkflow(CompleteUpdate, "complete-1", &testsuite.TestUpdateCallback{
			OnReject:   func(err error) { switchErr = err },
			OnAccept:   func() { t.Error("Complete was accepted before the cutover") },
			OnComplete: func(any, error) {},
		})
		env.SignalWorkflow(CancelSignal, nil)
	}, 10*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	if !env.IsWorkflowCompleted() {
		t.Fatal("the workflow did not complete")
	}
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Phase != PhaseCancelled {
		t.Fatalf("phase %q, want %q; steps %v", res.Phase, PhaseCancelled, res.Steps)
	}
	if atReady.Phase != PhaseReadyForCutover || atReady.Copied["public.orders"] != 200 || atReady.LastDiff == nil || !atReady.LastDiff.Done {
		t.Fatalf("progress before the cancel: %+v", atReady)
	}
	if s := atReady.Streams["s2"]; s.LagBytes > defaultMaxLagBytes {
		t.Fatalf("ready with lag %d", s.LagBytes)
	}
	var appErr *temporal.ApplicationError
	if !errors.As(switchErr, &appErr) || appErr.Type() != pgerr.ObjectNotInPrerequisiteState {
		t.Fatalf("Complete before the cutover: %v", switchErr)
	}
	// Copies, then streams, a diff with the streams stopped, streams again,
	// and the cleanup after they stopped.
	if f.called("copy") != 2 || f.called("diff") != 1 || f.called("stream") != 4 || f.called("cleanup") != 1 {
		t.Fatalf("calls: %v", f.calls)
	}
	if len(f.slots) != 0 {
		t.Fatalf("slots left: %v", f.slots)
	}
}

func TestReshardRefusedPlanChangesNothing(t *testing.T) {
	f := &fakeReplicator{planErr: temporal.NewNonRetryableApplicationError("target key ranges overlap", pgerr.InvalidParameterValue, nil)}
	env := newReshardEnv(t, f)
	env.ExecuteWorkflow(Reshard, reshardIn)
	err := env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != pgerr.InvalidParameterValue {
		t.Fatalf("error %v, want SQLSTATE %s", err, pgerr.InvalidParameterValue)
	}
	if f.called("plan") != 1 || len(f.calls) != 1 {
		t.Fatalf("calls: %v", f.calls)
	}
}

func TestReshardCancelDuringCopyDropsSlots(t *testing.T) {
	f := &fakeReplicator{copyBlocks: true}
	env := newReshardEnv(t, f)
	env.RegisterDelayedCallback(func() {
		if p := queryProgress(t, env); p.Phase != PhaseCopying {
			t.Errorf("phase %q before the cancel", p.Phase)
		}
		env.SignalWorkflow(CancelSignal, nil)
	}, time.Second)
	env.ExecuteWorkflow(Reshard, reshardIn)
	var res ReshardResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	if res.Phase != PhaseCancelled || f.called("cleanup") != 1 || f.called("stream") != 0 || len(f.slots) != 0 {
		t.Fatalf("result %+v, calls %v, slots %v", res, f.calls, f.slots)
	}
}

func TestReshardContinuesAsNewWithoutCopyingAgain(t *testing.T) {
	f := &fakeReplicator{}
	env := newReshardEnv(t, f)
	in := reshardIn
	in.Resume = &ReshardResume{Plan: testPlan, Copied: map[string]int64{"public.orders": 7},
		LastDiff: &DiffTablesResult{Done: true}}
	env.RegisterDelayedCallback(func() {
		if p := queryProgress(t, env); p.Phase != PhaseReadyForCutover || p.Copied["public.orders"] != 7 {
			t.Errorf("progress after continuing: %+v", p)
		}
		env.SignalWorkflow(CancelSignal, nil)
	}, 5*time.Minute)
	env.ExecuteWorkflow(Reshard, in)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	if f.called("plan") != 0 || f.called("copy") != 0 || f.called("diff") != 0 || f.called("stream") != 2 || f.called("cleanup") != 1 {
		t.Fatalf("calls: %v", f.calls)
	}
}

// The plan names a replicator for s1 only: s1's copy and streams are
// scheduled on its task queue, s2's on the workflow's own.
func TestReshardRoutesPerSourceActivitiesToReplicators(t *testing.T) {
	f := &fakeReplicator{queues: map[string]string{"s1": ReplicatorQueue("s1")}}
	env := newReshardEnv(t, f)
	env.RegisterDelayedCallback(func() {
		if p := queryProgress(t, env); p.Phase != PhaseReadyForCutover {
			t.Errorf("phase %q before the cancel", p.Phase)
		}
		env.SignalWorkflow(CancelSignal, nil)
	}, 10*time.Minute)
	env.ExecuteWorkflow(Reshard, reshardIn)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	// Each ran at least once (a stream started again after the VDiff may
	// be cancelled before the test environment reports its start), and
	// every run on its source's queue.
	own := "default-test-taskqueue"
	want := map[string]string{"copy s1": "replicator-s1", "stream s1": "replicator-s1", "copy s2": own, "stream s2": own}
	for call, queue := range want {
		got := f.ranOn[call]
		if len(got) == 0 {
			t.Errorf("%s never ran", call)
		}
		for _, q := range got {
			if q != queue {
				t.Errorf("%s ran on %v, want %s", call, got, queue)
				break
			}
		}
	}
}
