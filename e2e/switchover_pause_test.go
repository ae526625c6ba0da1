package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"

	"github.com/tesseradb/tessera/workflows"
)

// TestSwitchoverPauses: a switchover on an idle shard holds statements
// for well under the drain's 2 s limit (no transaction is open, so the
// drain has nothing to wait for), and under 4 writers through the router
// no writer goes 2 s without an acknowledged write, none fails, and none
// acknowledged is lost. The goals are 0.5 s and 1 s; this 2-core machine,
// shared, does not always meet them (docs/operations.md has the figures),
// so the test asserts bounds that still catch a drain that runs to its
// limit, and logs the figures and each step's time.
func TestSwitchoverPauses(t *testing.T) {
	startWorker(t, "e2e-pauses", true)
	addr := cluster.Info().Router
	ensureTable(t, addr)
	switchover := func() workflows.SwitchoverResult {
		t.Helper()
		before := settled(t)
		run := startWorkflow(t, workflows.SwitchoverID(shard), workflows.SwitchoverName, workflows.SwitchoverInput{Shard: shard})
		var res workflows.SwitchoverResult
		if err := run.Get(context.Background(), &res); err != nil {
			t.Fatalf("switchover: %v", err)
		}
		t.Logf("switchover %s -> %s held statements %d ms; activities: %s", res.OldPrimary, res.NewPrimary, res.PauseMillis, activityTimes(t, run.GetID(), run.GetRunID()))
		awaitRejoined(t, before.Primary, 60*time.Second)
		return res
	}
	idle := switchover()
	if idle.PauseMillis > 1500 {
		t.Errorf("a switchover of an idle shard held statements %d ms (want well under the drain's 2 s limit; the goal is 500)", idle.PauseMillis)
	}

	w := startWriters(t, "switchover", addr, 4, 7_000_000)
	time.Sleep(time.Second)
	w.disturb(time.Now())
	busy := switchover()
	time.Sleep(time.Second)
	w.finish()
	t.Logf("switchover under 4 writers (sync durability, 2 replicas): held %d ms; %v", busy.PauseMillis, w)
	if gap := w.longestGap(); gap > 2*time.Second {
		t.Errorf("a writer went %v without an acknowledged write (want under 2 s; the goal is 1 s)", gap.Round(time.Millisecond))
	}
	if len(w.errs) > 0 {
		t.Errorf("writers saw %d errors during a switchover, first: %s", len(w.errs), w.errs[0])
	}
	checkAcknowledgedPresent(t, addr, w)
}

// activityTimes lists a workflow run's activities with how long each
// took from its scheduling to its completion, by the server's clock.
func activityTimes(t *testing.T, id, runID string) string {
	t.Helper()
	it := tc.GetWorkflowHistory(context.Background(), id, runID, false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	scheduled := map[int64]*historypb.HistoryEvent{}
	var out []string
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Logf("history of %s: %v", id, err)
			break
		}
		if a := ev.GetActivityTaskScheduledEventAttributes(); a != nil {
			scheduled[ev.EventId] = ev
		}
		if a := ev.GetActivityTaskCompletedEventAttributes(); a != nil {
			if s := scheduled[a.ScheduledEventId]; s != nil {
				name := s.GetActivityTaskScheduledEventAttributes().ActivityType.GetName()
				out = append(out, fmt.Sprintf("%s %v", name, ev.EventTime.AsTime().Sub(s.EventTime.AsTime()).Round(time.Millisecond)))
			}
		}
	}
	return strings.Join(out, ", ")
}
