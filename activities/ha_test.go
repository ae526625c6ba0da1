package activities_test

import (
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/topo/store"
)

// call runs one activity as a worker would, in Temporal's activity test
// environment, and decodes its result into T.
func call[T any](t *testing.T, fn any, args ...any) (T, error) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.RegisterActivity(fn)
	var out T
	v, err := env.ExecuteActivity(fn, args...)
	if err == nil && v != nil && v.HasValue() {
		err = v.Get(&out)
	}
	return out, err
}

func must[T any](t *testing.T, fn any, args ...any) T {
	t.Helper()
	out, err := call[T](t, fn, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// code is the SQLSTATE an activity failed with.
func code(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Type()
	}
	return ""
}

func inspect(t *testing.T) activities.ShardView {
	t.Helper()
	return must[activities.ShardView](t, acts.InspectShard, shard)
}

// streamingFrom waits until the primary has every other instance
// streaming from it.
func streamingFrom(t *testing.T, primary string) activities.ShardView {
	t.Helper()
	var view activities.ShardView
	eventually(t, 20*time.Second, "replicas streaming from "+primary, func() error {
		view = inspect(t)
		pv, _ := view.Instance(primary)
		want := []string{}
		for _, in := range view.Instances {
			if in.ID != primary {
				want = append(want, in.ID)
			}
		}
		if !pv.Writable || !slices.Equal(pv.Streaming, want) {
			return fmt.Errorf("%s writable %v, streaming %v, want %v", primary, pv.Writable, pv.Streaming, want)
		}
		return nil
	})
	return view
}

func TestInspectShard(t *testing.T) {
	primary := currentPrimary(t)
	view := streamingFrom(t, primary)
	if len(view.Instances) != 3 || view.State.Shard != shard {
		t.Fatalf("view %+v", view)
	}
	for _, in := range view.Instances {
		wantRole := store.RoleReplica
		if in.ID == primary {
			wantRole = store.RolePrimary
		}
		if !in.Reachable || !in.Serving || in.Role != wantRole || in.Zone == "" || in.Timeline == 0 {
			t.Errorf("%s: %+v", in.ID, in)
		}
		if in.Role == store.RoleReplica && (in.ReceiveLSN == 0 || in.ReplayLSN == 0) {
			t.Errorf("%s: replica without LSNs: %+v", in.ID, in)
		}
	}
	if got := view.ReportedPrimaries(); !slices.Equal(got, []string{primary}) {
		t.Errorf("reported primaries %v", got)
	}
	if _, err := call[activities.ShardView](t, acts.InspectShard, ""); code(err) != "22023" {
		t.Errorf("empty shard: %v", err)
	}
}

// TestSwitchoverSequence runs the steps of a switchover one by one on
// the real shard and checks that each did what it says, that a commit
// made on the old primary survives, and that the old primary replicates
// from the new one afterwards.
func TestSwitchoverSequence(t *testing.T) {
	old := currentPrimary(t)
	streamingFrom(t, old)
	cand, other := "s1-c", "s1-b"
	if old == cand {
		cand, other = "s1-a", "s1-b"
	}
	state, err := st.GetShardState(testCtx(t), shard)
	if err != nil {
		t.Fatal(err)
	}
	exec(t, old, "CREATE TABLE IF NOT EXISTS moves (id serial PRIMARY KEY, note text)")
	exec(t, old, "INSERT INTO moves (note) SELECT 'bulk' FROM generate_series(1, 20000)")
	exec(t, old, fmt.Sprintf("INSERT INTO moves (note) VALUES ('last on %s')", old))

	fenced := must[activities.FenceResult](t, acts.FenceInstance, activities.InstanceInput{Shard: shard, Instance: old})
	if fenced.CurrentLSN == 0 {
		t.Fatal("fence reported no WAL position")
	}
	// Fencing twice is fine, and writes are refused.
	must[activities.FenceResult](t, acts.FenceInstance, activities.InstanceInput{Shard: shard, Instance: old})
	if err := tryExec(t, old, "INSERT INTO moves (note) VALUES ('after fence')"); err == nil || !strings.Contains(err.Error(), "25006") {
		t.Errorf("write on a fenced primary: %v", err)
	}

	replayed := must[pgmanager.LSN](t, acts.WaitForReplay, activities.ReplayInput{Shard: shard, Instance: cand, LSN: fenced.CurrentLSN})
	if replayed < fenced.CurrentLSN {
		t.Fatalf("replayed %s < %s", replayed, fenced.CurrentLSN)
	}
	if got, err := query(t, cand, fmt.Sprintf("SELECT count(*)::text FROM moves WHERE note = 'last on %s'", old)); err != nil || got != "1" {
		t.Fatalf("candidate after the wait for replay: %q, %v", got, err)
	}

	// A switchover runs the steps up to here as local activities, which
	// a worker that died runs again from the start (workflows/calls.go):
	// once fenced, the drain is refused or finds nothing open, the fence
	// answers a position the candidate has replayed, and so on.
	if open, err := call[int](t, acts.DrainTransactions, activities.DrainInput{Shard: shard, Instance: old, Wait: time.Second}); err == nil && open != 0 {
		t.Errorf("drain on a fenced primary: %d transactions open", open)
	}
	refenced := must[activities.FenceResult](t, acts.FenceInstance, activities.InstanceInput{Shard: shard, Instance: old})
	if refenced.CurrentLSN < fenced.CurrentLSN {
		t.Errorf("fenced again at %s, before the first fence's %s", refenced.CurrentLSN, fenced.CurrentLSN)
	}
	must[pgmanager.LSN](t, acts.WaitForReplay, activities.ReplayInput{Shard: shard, Instance: cand, LSN: refenced.CurrentLSN})

	// The durability policy is set on the candidate while it is still a
	// replica, and holds from its promotion on.
	early := must[string](t, acts.ApplyDurability, activities.DurabilityInput{Shard: shard, Primary: cand})
	if want := activities.SynchronousStandbyNames(state.Durability, cand, inspect(t).Members()); early != want || early == "" {
		t.Errorf("standbys set on the candidate %q, want %q", early, want)
	}
	for range 2 { // promoting a primary succeeds at once
		must[struct{}](t, acts.PromoteInstance, activities.InstanceInput{Shard: shard, Instance: cand})
	}
	if got, _ := query(t, cand, "SHOW synchronous_standby_names"); got != early {
		t.Errorf("synchronous_standby_names on %s after its promotion = %q, want %q", cand, got, early)
	}
	pub := activities.PublishInput{Shard: shard, Primary: cand, Expected: state.Primary}
	first := must[store.ShardState](t, acts.PublishPrimary, pub)
	again := must[store.ShardState](t, acts.PublishPrimary, pub)
	if first.Primary != cand || first.Term != state.Term+1 || again.Term != first.Term {
		t.Errorf("publish: %+v then %+v, from term %d", first, again, state.Term)
	}
	stale := activities.PublishInput{Shard: shard, Primary: other, Expected: old}
	if _, err := call[store.ShardState](t, acts.PublishPrimary, stale); code(err) != "55000" {
		t.Errorf("publishing over a primary someone else moved: %v", err)
	}

	for range 2 { // run again by a worker that replaced a dead one
		must[struct{}](t, acts.FollowPrimary, activities.FollowInput{Shard: shard, Instance: other, Primary: cand})
	}
	must[struct{}](t, acts.AwaitStreaming, activities.FollowInput{Shard: shard, Instance: other, Primary: cand})
	if _, err := call[struct{}](t, acts.FollowPrimary, activities.FollowInput{Shard: shard, Instance: old, Primary: cand}); err == nil {
		t.Error("FollowPrimary on a former primary succeeded; it needs a rewind")
	}
	must[struct{}](t, acts.RewindInstance, activities.FollowInput{Shard: shard, Instance: old, Primary: cand})
	must[struct{}](t, acts.AwaitStreaming, activities.FollowInput{Shard: shard, Instance: old, Primary: cand})

	names := must[string](t, acts.ApplyDurability, activities.DurabilityInput{Shard: shard})
	if want := activities.SynchronousStandbyNames(state.Durability, cand, inspect(t).Members()); names != want {
		t.Errorf("standbys %q, want %q", names, want)
	}
	if got, _ := query(t, cand, "SHOW synchronous_standby_names"); got != names {
		t.Errorf("synchronous_standby_names on %s = %q, want %q", cand, got, names)
	}

	// The new primary takes writes, synchronously confirmed, and both
	// others replicate them; the old primary is a replica now.
	exec(t, cand, fmt.Sprintf("INSERT INTO moves (note) VALUES ('first on %s')", cand))
	for _, id := range []string{old, other} {
		eventually(t, 15*time.Second, id+" replicates the new primary", func() error {
			got, err := query(t, id, fmt.Sprintf("SELECT count(*)::text FROM moves WHERE note IN ('first on %s', 'last on %s')", cand, old))
			if err != nil || got != "2" {
				return fmt.Errorf("%q, %v", got, err)
			}
			return nil
		})
	}
	if got, _ := query(t, old, "SELECT pg_is_in_recovery()::text"); got != "true" {
		t.Errorf("old primary in recovery: %q", got)
	}
	streamingFrom(t, cand)
	if got := inspect(t).ReportedPrimaries(); !slices.Equal(got, []string{cand}) {
		t.Errorf("reported primaries after the switchover: %v", got)
	}
}

func TestUnfence(t *testing.T) {
	primary := currentPrimary(t)
	in := activities.InstanceInput{Shard: shard, Instance: primary}
	must[activities.FenceResult](t, acts.FenceInstance, in)
	if err := tryExec(t, primary, "CREATE TABLE IF NOT EXISTS unfenced (id int)"); err == nil || !strings.Contains(err.Error(), "25006") {
		t.Fatalf("write on a fenced primary: %v", err)
	}
	must[struct{}](t, acts.UnfenceInstance, in)
	must[struct{}](t, acts.UnfenceInstance, in)
	if err := tryExec(t, primary, "CREATE TABLE IF NOT EXISTS unfenced (id int)"); err != nil {
		t.Fatalf("write after unfencing: %v", err)
	}
	if _, err := call[struct{}](t, acts.UnfenceInstance, activities.InstanceInput{Shard: shard, Instance: "s1-zz"}); code(err) != "08006" {
		t.Errorf("unfencing an unknown instance: %v", err)
	}
}

func TestBufferSignal(t *testing.T) {
	first := must[time.Time](t, acts.SetBuffer, activities.BufferInput{Shard: shard, Reason: "switchover", For: 10 * time.Second})
	set := must[time.Time](t, acts.SetBuffer, activities.BufferInput{Shard: shard, Reason: "switchover", For: 10 * time.Second})
	if set.Before(first) {
		t.Fatalf("set again at %v, before the first time, %v", set, first)
	}
	s, err := st.GetShardState(testCtx(t), shard)
	if err != nil {
		t.Fatal(err)
	}
	if !s.Buffering(time.Now()) || s.Buffer.Reason != "switchover" || s.Buffer.Until.Sub(set) != 10*time.Second {
		t.Fatalf("buffer %+v set at %v", s.Buffer, set)
	}
	// Someone else's signal is not ours to clear.
	must[time.Time](t, acts.ClearBuffer, activities.BufferInput{Shard: shard, Reason: "cutover"})
	if s, _ := st.GetShardState(testCtx(t), shard); s.Buffer == nil {
		t.Fatal("cleared a signal set for another reason")
	}
	cleared := must[time.Time](t, acts.ClearBuffer, activities.BufferInput{Shard: shard, Reason: "switchover"})
	if s, _ := st.GetShardState(testCtx(t), shard); s.Buffer != nil || cleared.Before(set) {
		t.Fatalf("after clearing: %+v, cleared at %v", s.Buffer, cleared)
	}
	// A switchover's worker that died runs these again (workflows/calls.go).
	must[time.Time](t, acts.ClearBuffer, activities.BufferInput{Shard: shard, Reason: "switchover"})
	if s, _ := st.GetShardState(testCtx(t), shard); s.Buffer != nil {
		t.Fatalf("a second clearing left %+v", s.Buffer)
	}
}
