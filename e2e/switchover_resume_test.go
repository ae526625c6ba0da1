package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/converter"

	"github.com/tesseradb/tessera/workflows"
)

// TestWorkerKilledMidSwitchover: the worker running a switchover is
// killed (SIGKILL, a process of its own) while it runs the switchover's
// local steps, which its history does not record yet: the buffer signal
// is set and the drain waits for a transaction open on the old primary.
// Another worker runs those steps again once the dead one's workflow
// task times out, and the switchover completes: the new primary
// published with the term moved once, the buffer cleared, the
// transaction, committed after the kill, present, the old primary
// rejoined.
func TestWorkerKilledMidSwitchover(t *testing.T) {
	settle := startWorker(t, "e2e-settle", true)
	before := settled(t)
	settle()
	addr := cluster.Info().Router
	ensureTable(t, addr)
	ctx := context.Background()
	conn := routerConn(t, addr)
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO ha_writes VALUES (-21, 'open across a worker kill')"); err != nil {
		t.Fatal(err)
	}

	// Only this worker, without an admin, runs the switchover.
	first := workerProcess(t, "e2e-switchover-first")
	run := startWorkflow(t, workflows.SwitchoverID(shard), workflows.SwitchoverName, workflows.SwitchoverInput{Shard: shard})
	// The buffer signal set means the local steps have begun; the open
	// transaction keeps the drain waiting (up to 2 s).
	eventually(t, 30*time.Second, "the switchover sets the buffer signal", func() error {
		if st := shardState(t); st.Buffer == nil || st.Buffer.Reason != "switchover" {
			return fmt.Errorf("buffer signal %+v", st.Buffer)
		}
		return nil
	})
	first.Process.Kill()
	first.Wait()
	if n := localSteps(t, run.GetID(), run.GetRunID(), ""); n != 0 {
		t.Fatalf("the history recorded %d local steps before the kill; the worker was not in them and the test proves nothing", n)
	}
	t.Log("killed the worker while its local steps ran unrecorded")

	// The transaction, still on the unfenced old primary, commits.
	if _, err := tx.Exec(ctx, "INSERT INTO ha_writes VALUES (-22, 'open across a worker kill')"); err != nil {
		t.Fatal(err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("committing the transaction open across the kill: %v", err)
	}

	restarted := time.Now()
	startWorker(t, "e2e-switchover-second", true)
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var res workflows.SwitchoverResult
	if err := run.Get(waitCtx, &res); err != nil {
		t.Fatalf("switchover after the worker came back: %v", err)
	}
	t.Logf("switchover %s -> %s finished %v after a new worker started; statements held %d ms; steps: %s", res.OldPrimary, res.NewPrimary,
		time.Since(restarted).Round(time.Millisecond), res.PauseMillis, strings.Join(res.Steps, "; "))

	after := shardState(t)
	if res.OldPrimary != before.Primary || res.NewPrimary == before.Primary || after.Primary != res.NewPrimary || after.Term != before.Term+1 || after.Buffer != nil {
		t.Errorf("shard state before %+v, after %+v, result %+v", before, after, res)
	}
	// The dead worker's workflow task timed out, and its local steps were
	// recorded once, by the worker that ran them again.
	if n := localSteps(t, run.GetID(), run.GetRunID(), "SetBuffer"); n != 1 {
		t.Errorf("SetBuffer recorded %d times, want once", n)
	}
	timedOut := false
	iter := tc.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		timedOut = timedOut || ev.GetWorkflowTaskTimedOutEventAttributes() != nil
	}
	if !timedOut {
		t.Error("no workflow task timed out: the killed worker's task was not the one that died")
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM ha_writes WHERE id IN (-21, -22)").Scan(&n); err != nil || n != 2 {
		t.Errorf("rows of the transaction after the switchover: %d, %v; want 2", n, err)
	}
	awaitRejoined(t, before.Primary, 90*time.Second)
}

// localSteps counts the local activities a workflow run's history
// records, of the given type, or of any type when it is "".
func localSteps(t *testing.T, id, runID, activityType string) int {
	t.Helper()
	n := 0
	iter := tc.GetWorkflowHistory(context.Background(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		m := ev.GetMarkerRecordedEventAttributes()
		if m == nil || m.MarkerName != "LocalActivity" {
			continue
		}
		var data struct{ ActivityType string }
		if err := converter.GetDefaultDataConverter().FromPayloads(m.Details["data"], &data); err != nil {
			t.Fatal(err)
		}
		if activityType == "" || data.ActivityType == activityType {
			n++
		}
	}
	return n
}
