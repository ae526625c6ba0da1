package activities_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"

	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// runWorkflow runs one of package workflows' workflows with the real
// activities against the test shard, in Temporal's test environment (no
// server), and decodes its result into out.
func runWorkflow(t *testing.T, name string, in, out any) {
	t.Helper()
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	// The default (3 s of wall time) is shorter than a rewind of real
	// Postgres on a loaded machine.
	env.SetTestTimeout(2 * time.Minute)
	workflows.Register(env, acts)
	env.ExecuteWorkflow(name, in)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	if err := env.GetWorkflowResult(out); err != nil {
		t.Fatal(err)
	}
}

// TestWorkflows: a switchover, then the new primary's Postgres stops and
// a failover replaces it, and when it comes back acting as a primary,
// RepairShard fences it and rejoins it as a replica.
func TestWorkflows(t *testing.T) {
	old := currentPrimary(t)
	streamingFrom(t, old)

	var sw workflows.SwitchoverResult
	runWorkflow(t, workflows.SwitchoverName, workflows.SwitchoverInput{Shard: shard}, &sw)
	if sw.OldPrimary != old || sw.NewPrimary == old || currentPrimary(t) != sw.NewPrimary {
		t.Fatalf("switchover: %+v", sw)
	}
	t.Logf("switchover %s -> %s, routers held for %d ms", sw.OldPrimary, sw.NewPrimary, sw.PauseMillis)
	streamingFrom(t, sw.NewPrimary)

	lost := sw.NewPrimary
	exec(t, lost, "CREATE TABLE IF NOT EXISTS lost (id int)")
	if err := nodes[lost].Stop(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	var fo workflows.FailoverResult
	runWorkflow(t, workflows.FailoverName, workflows.FailoverInput{Shard: shard, Reason: "test"}, &fo)
	if fo.OldPrimary != lost || fo.NewPrimary == lost || fo.Term != sw.Term+1 || currentPrimary(t) != fo.NewPrimary {
		t.Fatalf("failover: %+v", fo)
	}
	// Run again, it finds the new primary healthy and does nothing.
	var again workflows.FailoverResult
	runWorkflow(t, workflows.FailoverName, workflows.FailoverInput{Shard: shard}, &again)
	if again.NewPrimary != fo.NewPrimary || again.OldPrimary != fo.NewPrimary || again.Term != fo.Term {
		t.Errorf("second failover: %+v", again)
	}

	// The lost primary restarts as a primary nobody writes to.
	if err := nodes[lost].Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, lost+" acting as a primary again", func() error {
		if _, err := query(t, lost, "SELECT 1::text"); err != nil {
			return err
		}
		// RepairShard sees it through its sidecar's health. The sidecar
		// fences a deposed primary itself, and reports it not serving
		// while it does: wait until it is done (serving, fenced).
		if iv, _ := inspect(t).Instance(lost); !iv.Serving || iv.Role != store.RolePrimary || !iv.Fenced {
			return fmt.Errorf("its sidecar reports it serving %v as %s, fenced %v", iv.Serving, iv.Role, iv.Fenced)
		}
		return nil
	})
	// The admin runs RepairShard periodically; so does this test, for a
	// few seconds: the sidecar's health of an instance it has just fenced
	// flaps for a moment (the fence ends pgmanager's status connection
	// too), and a repair that finds it not serving skips it.
	var rep workflows.RepairResult
	deadline := time.Now().Add(20 * time.Second)
	for len(rep.Actions) == 0 {
		runWorkflow(t, workflows.RepairShardName, workflows.RepairInput{Shard: shard}, &rep)
		if len(rep.Actions) == 0 && time.Now().After(deadline) {
			iv, _ := inspect(t).Instance(lost)
			t.Fatalf("20 s of repairs did nothing; %s now: %+v", lost, iv)
		}
		if len(rep.Actions) == 0 {
			time.Sleep(500 * time.Millisecond)
		}
	}
	t.Logf("repair: %q", rep.Actions)
	view := streamingFrom(t, fo.NewPrimary)
	if got := view.ReportedPrimaries(); !slices.Equal(got, []string{fo.NewPrimary}) {
		t.Errorf("primaries after repair: %v", got)
	}
	exec(t, fo.NewPrimary, "INSERT INTO lost VALUES (1)")
	eventually(t, 10*time.Second, lost+" replicates", func() error {
		_, err := query(t, lost, "SELECT id::text FROM lost")
		return err
	})
}
