package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/router"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

const shard = "shard-0"

func shardState(t *testing.T) store.ShardState {
	t.Helper()
	st, err := cluster.Store().GetShardState(context.Background(), shard)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

// instanceStatus asks an instance's sidecar how it is.
func instanceStatus(t *testing.T, id string) (*pb.InstanceStatus, error) {
	t.Helper()
	recs, err := cluster.Store().ListRecords(context.Background(), store.KindSidecar)
	if err != nil {
		return nil, err
	}
	for _, r := range recs {
		if r.InstanceID != id {
			continue
		}
		c, err := sidecar.Dial(r.GRPCAddr, sidecar.DialOptions{Secret: cluster.Secret()})
		if err != nil {
			return nil, err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		return c.Status(ctx, &pb.StatusRequest{})
	}
	return nil, fmt.Errorf("no sidecar for %s", id)
}

// settled waits until the admin has adopted the shard, the primary
// enforces the default policy (sync: a replica confirms each commit) with
// both replicas streaming, every instance serves, and no workflow runs
// (a rejoin or repair a previous test caused).
func settled(t *testing.T) store.ShardState {
	t.Helper()
	return settledUnder(t, store.DurabilitySync)
}

// settledUnder is settled for a shard whose policy is durability: under
// async the primary must have no synchronous standbys.
func settledUnder(t *testing.T, durability store.Durability) store.ShardState {
	t.Helper()
	var st store.ShardState
	eventually(t, 90*time.Second, "the shard has a recorded primary enforcing "+string(durability)+" durability", func() error {
		open, err := tc.ListOpenWorkflow(context.Background(), &workflowservice.ListOpenWorkflowExecutionsRequest{Namespace: "default", MaximumPageSize: 10})
		if err != nil {
			return err
		}
		if n := len(open.Executions); n > 0 {
			return fmt.Errorf("%d workflows run, such as %s", n, open.Executions[0].Execution.WorkflowId)
		}
		recs, err := cluster.Store().ListRecords(context.Background(), store.KindSidecar)
		if err != nil {
			return err
		}
		for _, r := range recs {
			s, err := instanceStatus(t, r.InstanceID)
			if err != nil {
				return err
			}
			if h := s.GetHealth(); !h.GetServing() || h.GetError() != "" {
				return fmt.Errorf("%s is not serving: %v", r.InstanceID, h)
			}
		}
		st = shardState(t)
		if st.Primary == "" {
			return fmt.Errorf("no primary recorded")
		}
		s, err := instanceStatus(t, st.Primary)
		if err != nil {
			return err
		}
		if async := durability == store.DurabilityAsync; (s.SynchronousStandbyNames == "") != async {
			return fmt.Errorf("primary %s has synchronous_standby_names %q under %s durability", st.Primary, s.SynchronousStandbyNames, durability)
		}
		streaming := 0
		for _, r := range s.Replicas {
			if r.State == "streaming" {
				streaming++
			}
		}
		if streaming < 2 {
			return fmt.Errorf("%d replicas streaming from %s, want 2", streaming, st.Primary)
		}
		return nil
	})
	return st
}

// awaitRejoined waits until id serves as a replica of the shard's primary.
func awaitRejoined(t *testing.T, id string, within time.Duration) {
	t.Helper()
	eventually(t, within, id+" rejoins as a replica", func() error {
		st := shardState(t)
		s, err := instanceStatus(t, st.Primary)
		if err != nil {
			return err
		}
		for _, r := range s.Replicas {
			if r.ApplicationName == id && r.State == "streaming" {
				return nil
			}
		}
		return fmt.Errorf("%s does not stream from %s", id, st.Primary)
	})
}

func startWorkflow(t *testing.T, id, name string, in any) client.WorkflowRun {
	t.Helper()
	run, err := tc.ExecuteWorkflow(context.Background(), client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, name, in)
	if err != nil {
		t.Fatal(err)
	}
	return run
}

// TestPlannedSwitchoverUnderPgbench: a switchover while pgbench writes
// through the router costs clients no error, only a pause.
func TestPlannedSwitchoverUnderPgbench(t *testing.T) {
	startWorker(t, "e2e-switchover", true)
	before := settled(t)
	addr := cluster.Info().Router
	pgbench := pgbenchPath(t)
	env := []string{"PGPASSWORD=postgres", "PGSSLMODE=disable"}
	host, port := splitAddr(addr)
	args := []string{"-h", host, "-p", port, "-U", "postgres"}
	initCmd := exec.Command(pgbench, append(append([]string{}, args...), "-i", "-q", "-s", "1", "postgres")...)
	initCmd.Env = append(initCmd.Environ(), env...)
	if out, err := initCmd.CombinedOutput(); err != nil {
		t.Fatalf("pgbench -i: %v\n%s", err, out)
	}
	ensureTable(t, addr)
	probe := startWriters(t, "probe", addr, 2, 1_000_000)

	bench := exec.Command(pgbench, append(append([]string{}, args...), "-n", "-c", "4", "-j", "2", "-T", "12", "-M", "prepared", "-N", "postgres")...)
	bench.Env = append(bench.Environ(), env...)
	var out strings.Builder
	bench.Stdout, bench.Stderr = &out, &out
	if err := bench.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	probe.disturb(time.Now())
	run := startWorkflow(t, workflows.SwitchoverID(shard), workflows.SwitchoverName, workflows.SwitchoverInput{Shard: shard})
	var res workflows.SwitchoverResult
	if err := run.Get(context.Background(), &res); err != nil {
		t.Fatalf("switchover: %v", err)
	}
	berr := bench.Wait()
	probe.finish()
	t.Logf("switchover %s -> %s (term %d), buffer held %d ms; steps: %s", res.OldPrimary, res.NewPrimary, res.Term, res.PauseMillis, strings.Join(res.Steps, "; "))
	steps, _ := activityTimes(t, run.GetID(), run.GetRunID())
	t.Logf("step times: %s; load average: %s", steps, loadAverage())
	t.Logf("probe writers: %v", probe)
	t.Logf("pgbench:\n%s", out.String())
	if berr != nil {
		t.Errorf("pgbench failed: %v", berr)
	}
	if m := regexp.MustCompile(`number of failed transactions: (\d+)`).FindStringSubmatch(out.String()); m == nil || m[1] != "0" {
		t.Errorf("pgbench reported failed transactions (or none counted): %v", m)
	}
	if len(probe.errs) > 0 {
		t.Errorf("probe writers saw %d errors, first: %s", len(probe.errs), probe.errs[0])
	}
	after := shardState(t)
	if res.OldPrimary != before.Primary || res.NewPrimary == before.Primary || after.Primary != res.NewPrimary || after.Term != before.Term+1 {
		t.Errorf("shard state before %+v, after %+v, result %+v", before, after, res)
	}
	if after.Buffering(time.Now()) {
		t.Error("the buffer signal outlived the switchover")
	}
	checkAcknowledgedPresent(t, addr, probe)
	awaitRejoined(t, before.Primary, 60*time.Second)
}

// TestSwitchoverLetsOpenTransactionsFinish: a transaction under way when
// a switchover begins commits on the old primary: the switchover waits
// for it before fencing.
func TestSwitchoverLetsOpenTransactionsFinish(t *testing.T) {
	startWorker(t, "e2e-drain", true)
	before := settled(t)
	addr := cluster.Info().Router
	ensureTable(t, addr)
	conn := routerConn(t, addr)
	ctx := context.Background()
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO ha_writes VALUES (-1, 'open transaction')"); err != nil {
		t.Fatal(err)
	}
	run := startWorkflow(t, workflows.SwitchoverID(shard), workflows.SwitchoverName, workflows.SwitchoverInput{Shard: shard})
	time.Sleep(500 * time.Millisecond) // the switchover waits meanwhile
	if _, err := tx.Exec(ctx, "INSERT INTO ha_writes VALUES (-2, 'open transaction')"); err != nil {
		t.Fatalf("a statement of a transaction open when the switchover began: %v", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatalf("committing a transaction open when the switchover began: %v", err)
	}
	var res workflows.SwitchoverResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	t.Logf("statements held %d ms; steps: %s", res.PauseMillis, strings.Join(res.Steps, "; "))
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM ha_writes WHERE id IN (-1, -2)").Scan(&n); err != nil || n != 2 {
		t.Fatalf("rows of the transaction after the switchover: %d, %v; want 2", n, err)
	}
	awaitRejoined(t, before.Primary, 60*time.Second)
}

// TestFailoverAfterPrimaryCrash: kill -9 of the primary (its host lost)
// under a steady write load, through two routers, one buffering and one
// not: writes resume within seconds, no acknowledged write is lost, and
// the old primary, back, is rewound and rejoins as a replica.
func TestFailoverAfterPrimaryCrash(t *testing.T) {
	startWorker(t, "e2e-failover", true)
	before := settled(t)
	buffered := cluster.Info().Router
	unbuffered := startRouter(t, router.BufferConfig{Disabled: true})
	ensureTable(t, buffered)
	withBuffer := startWriters(t, "buffered", buffered, 4, 2_000_000)
	without := startWriters(t, "unbuffered", unbuffered, 4, 3_000_000)
	time.Sleep(2 * time.Second)

	killed := time.Now()
	withBuffer.disturb(killed)
	without.disturb(killed)
	if err := cluster.Crash(context.Background(), before.Primary); err != nil {
		t.Fatal(err)
	}
	var promoted time.Time
	eventually(t, 60*time.Second, "a new primary is published", func() error {
		if st := shardState(t); st.Primary == before.Primary {
			return fmt.Errorf("primary still %s", st.Primary)
		}
		promoted = time.Now()
		return nil
	})
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		var res workflows.FailoverResult
		err := tc.GetWorkflow(context.Background(), workflows.FailoverID(shard), "").Get(context.Background(), &res)
		t.Logf("failover: %v; steps: %s", err, strings.Join(res.Steps, "; "))
		for _, id := range []string{"shard-0-0", "shard-0-1", "shard-0-2"} {
			s, err := instanceStatus(t, id)
			t.Logf("%s: %v %v", id, s, err)
		}
	})
	eventually(t, 30*time.Second, "writes succeed again through both routers", func() error {
		if !withBuffer.ackedAfter(promoted) || !without.ackedAfter(promoted) {
			return fmt.Errorf("some writer has had no write acknowledged since the new primary was published (%v; %v)", withBuffer, without)
		}
		return nil
	})
	time.Sleep(time.Second)
	withBuffer.finish()
	without.finish()
	after := shardState(t)
	t.Logf("primary %s killed; %s took over (term %d), published %v after the kill", before.Primary, after.Primary, after.Term, promoted.Sub(killed).Round(time.Millisecond))
	t.Logf("writes were unavailable for at most %v with buffering, %v without", withBuffer.longestGap().Round(time.Millisecond), without.longestGap().Round(time.Millisecond))
	t.Logf("%v", withBuffer)
	t.Logf("%v", without)
	if after.Primary == before.Primary || after.Term <= before.Term {
		t.Fatalf("no failover: state %+v", after)
	}
	// The kill-to-writable budget is 5 s; CI machines are slower than
	// the target, so the test allows twice that and the figure is logged.
	if gap := withBuffer.longestGap(); gap > 10*time.Second {
		t.Errorf("writes were unavailable for %v with buffering", gap)
	}
	if len(without.errs) <= len(withBuffer.errs) {
		t.Errorf("buffering made no difference: %d errors with, %d without", len(withBuffer.errs), len(without.errs))
	}
	checkAcknowledgedPresent(t, buffered, withBuffer, without)

	if err := cluster.Revive(context.Background(), before.Primary); err != nil {
		t.Fatal(err)
	}
	awaitRejoined(t, before.Primary, 90*time.Second)
	settled(t)
}

// TestWorkerKilledMidFailover: the worker running a failover is killed
// (SIGKILL, a process of its own) while one of the failover's activities
// runs on it; the workflow finishes when another worker starts. The
// workflow's history proves it: the activity that was in flight at the
// kill was started again (attempt 2 or later, after a timeout, by the new
// worker) and completed, and the workflow completed with the replica it
// had chosen as the new primary.
func TestWorkerKilledMidFailover(t *testing.T) {
	settle := startWorker(t, "e2e-settle", true)
	before := settled(t)
	settle()
	// Only this worker, without an admin, runs the failover, so that
	// nothing else acts on the shard meanwhile. It stops once it has
	// promoted the candidate, before it reports so: the promotion is made
	// and not recorded, the hardest moment for it to die. (Activities
	// allowed a single attempt, such as fencing, are not chosen: a
	// timeout ends them for good, by design, so they could not show a
	// retry.)
	const step = "PromoteInstance"
	first, stopped := stoppingWorkerProcess(t, "e2e-first", step)
	run := startWorkflow(t, workflows.FailoverID(shard), workflows.FailoverName,
		workflows.FailoverInput{Shard: shard, Force: true, Reason: "e2e: worker killed mid-failover"})
	ctx := context.Background()
	select {
	case <-stopped:
	case <-time.After(60 * time.Second):
		t.Fatalf("the worker did not reach %s within 60 s", step)
	}
	first.Process.Kill()
	first.Wait()
	// Asked after the kill, the server still counts the promotion as
	// running on the dead worker.
	var pa *workflowpb.PendingActivityInfo
	desc, err := tc.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range desc.PendingActivities {
		if p.ActivityType.GetName() == step && p.State == enumspb.PENDING_ACTIVITY_STATE_STARTED {
			pa = p
		}
	}
	if pa == nil {
		t.Fatalf("%s is not in flight after the worker died in it: %v", step, desc.PendingActivities)
	}
	t.Logf("killed worker %s while %s (activity %s, attempt %d of %d) ran on it",
		pa.LastWorkerIdentity, pa.ActivityType.GetName(), pa.ActivityId, pa.Attempt, pa.MaximumAttempts)
	killedIdentity := pa.LastWorkerIdentity

	time.Sleep(2 * time.Second)
	desc, err = tc.DescribeWorkflowExecution(ctx, run.GetID(), run.GetRunID())
	if err != nil {
		t.Fatal(err)
	}
	if st := desc.WorkflowExecutionInfo.Status; st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("with its worker killed the workflow is %v, want running", st)
	}
	restarted := time.Now()
	startWorker(t, "e2e-second", true)
	waitCtx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	var res workflows.FailoverResult
	if err := run.Get(waitCtx, &res); err != nil {
		t.Fatalf("failover after the worker came back: %v", err)
	}
	t.Logf("failover %s -> %s finished %v after a new worker started; steps: %s", res.OldPrimary, res.NewPrimary,
		time.Since(restarted).Round(time.Millisecond), strings.Join(res.Steps, "; "))

	// The history: the activity's scheduled event, then one started
	// event (Temporal records the last attempt's) saying attempt >= 2,
	// after a timeout, on a worker other than the killed one, then its
	// completion.
	var scheduledID int64
	var started *historypb.ActivityTaskStartedEventAttributes
	completed := false
	iter := tc.GetWorkflowHistory(ctx, run.GetID(), run.GetRunID(), false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case ev.GetActivityTaskScheduledEventAttributes().GetActivityId() == pa.ActivityId:
			scheduledID = ev.EventId
		case scheduledID != 0 && ev.GetActivityTaskStartedEventAttributes().GetScheduledEventId() == scheduledID:
			started = ev.GetActivityTaskStartedEventAttributes()
		case scheduledID != 0 && ev.GetActivityTaskCompletedEventAttributes().GetScheduledEventId() == scheduledID:
			completed = true
		case scheduledID != 0 && (ev.GetActivityTaskTimedOutEventAttributes().GetScheduledEventId() == scheduledID ||
			ev.GetActivityTaskFailedEventAttributes().GetScheduledEventId() == scheduledID):
			t.Errorf("activity %s (%s) ended without success: %v", pa.ActivityId, pa.ActivityType.GetName(), ev)
		}
	}
	switch {
	case scheduledID == 0:
		t.Errorf("activity %s is not in the workflow's history", pa.ActivityId)
	case started == nil:
		t.Errorf("activity %s (%s) was never recorded as started", pa.ActivityId, pa.ActivityType.GetName())
	default:
		timeout := started.GetLastFailure().GetTimeoutFailureInfo()
		t.Logf("%s: last attempt %d by %s after %v", pa.ActivityType.GetName(), started.Attempt, started.Identity, started.GetLastFailure().GetMessage())
		if started.Attempt < 2 || timeout == nil || started.Identity == killedIdentity {
			t.Errorf("%s was not run again after timing out on the killed worker: attempt %d by %q (killed: %q), previous failure %v",
				pa.ActivityType.GetName(), started.Attempt, started.Identity, killedIdentity, started.GetLastFailure())
		}
	}
	if !completed {
		t.Errorf("activity %s (%s) did not complete", pa.ActivityId, pa.ActivityType.GetName())
	}

	// The workflow's chosen candidate is the one it promoted.
	var chosen string
	for _, s := range res.Steps {
		if rest, ok := strings.CutPrefix(s, "promoting "); ok {
			chosen, _, _ = strings.Cut(rest, " ")
		}
	}
	after := shardState(t)
	if chosen == "" || chosen == before.Primary || res.NewPrimary != chosen || after.Primary != chosen || after.Term <= before.Term {
		t.Fatalf("primary before %s (term %d), promoted %q, after %s (term %d), result %+v", before.Primary, before.Term, chosen, after.Primary, after.Term, res)
	}
	awaitRejoined(t, before.Primary, 90*time.Second)
}

// TestDurabilityPolicies: SetDurability changes what the primary waits for.
func TestDurabilityPolicies(t *testing.T) {
	startWorker(t, "e2e-durability", true)
	st := settled(t)
	for _, tc := range []struct {
		policy store.Durability
		empty  bool
	}{{store.DurabilityAsync, true}, {store.DurabilityCrossZoneSync, false}, {store.DurabilitySync, false}} {
		run := startWorkflow(t, "durability-"+string(tc.policy), workflows.SetDurabilityName, workflows.DurabilityInput{Shard: shard, Policy: tc.policy})
		var res workflows.DurabilityResult
		if err := run.Get(context.Background(), &res); err != nil {
			t.Fatalf("%s: %v", tc.policy, err)
		}
		s, err := instanceStatus(t, st.Primary)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: synchronous_standby_names = %q", tc.policy, s.SynchronousStandbyNames)
		if (s.SynchronousStandbyNames == "") != tc.empty || s.SynchronousStandbyNames != res.SynchronousStandbyNames {
			t.Errorf("%s: primary has %q, workflow says %q", tc.policy, s.SynchronousStandbyNames, res.SynchronousStandbyNames)
		}
		if got := shardState(t).Durability; got != tc.policy {
			t.Errorf("recorded policy %q, want %q", got, tc.policy)
		}
	}
}

func pgbenchPath(t *testing.T) string {
	t.Helper()
	matches, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	if len(matches) == 0 {
		t.Fatal("pgbench not found")
	}
	return matches[len(matches)-1]
}

func splitAddr(addr string) (string, string) {
	i := strings.LastIndex(addr, ":")
	return addr[:i], addr[i+1:]
}

// startRouter starts another router on the cluster.
func startRouter(t *testing.T, buf router.BufferConfig) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := router.New(router.Config{ListenAddr: "127.0.0.1:0", Store: cluster.Store(), Secret: cluster.Secret(), Buffer: buf})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(context.Background()) })
	return r.Addr()
}
