package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/tesseradb/tessera/replicator/actions"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/worker"
	"github.com/tesseradb/tessera/workflows"
)

// TestReshardOnShardReplicator runs a reshard whose source, s1, has a
// Replicator of its own (worker.StartReplicator, as `tessera replicator
// --shard s1` runs): the plan routes s1's copy and streams to task queue
// replicator-s1, every other activity stays on the general worker's
// queue (read from the workflow's history), and the reshard reaches
// ready_for_cutover. Then the replicator is stopped: a row written on s1
// meanwhile does not reach its target, since nothing else polls s1's
// queue, and does once the replicator runs again, its stream retried
// from its slot. Last a replicator in a child process takes the stream
// over and is SIGKILLed: the stream resumes after the 5 s heartbeat
// timeout, once a replicator of s1 polls again.
func TestReshardOnShardReplicator(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	pg := reshardPostgres(t, ctx)
	dbOf := func(shard string) string { return "rep_" + shard }
	admin, err := pgx.Connect(ctx, pg.ConnConfig("postgres", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	conns := map[string]*pgx.Conn{}
	for _, s := range []string{"s1", "t1", "t2"} {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+dbOf(s)); err != nil {
			t.Fatal(err)
		}
		c, err := pgx.Connect(ctx, pg.ConnConfig(dbOf(s), ""))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, `CREATE TABLE customers (customer_id int8 PRIMARY KEY, name text)`); err != nil {
			t.Fatal(err)
		}
		conns[s] = c
	}
	if _, err := conns["s1"].Exec(ctx, `INSERT INTO customers SELECT i, 'c' || i FROM generate_series(1, 2000) i`); err != nil {
		t.Fatal(err)
	}

	const storeCluster = "replicator-e2e"
	st, err := store.Dial(ctx, cluster.Info().Etcd, storeCluster)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	top, err := topo.Parse([]byte(reshardTopology))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyTopology(ctx, top, store.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "t1", "t2"} {
		if _, err := st.UpdateShardState(ctx, s, func(ss *store.ShardState) error { ss.Primary = s + "-0"; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	conn := actions.ConnectorFunc(func(_ context.Context, shard, _ string) (string, error) {
		return pg.ConnConfig(dbOf(shard), ""), nil
	})

	// The general worker, on a queue of its own (the cluster's workers
	// lack these credentials), with every activity.
	const queue = "replicator-e2e"
	w := sdkworker.New(tc, queue, sdkworker.Options{})
	workflows.Register(w, storeActivities(st))
	(&actions.Actions{Store: st, Conn: conn}).Register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	startReplicator := func() *worker.Replicator {
		r, err := worker.StartReplicator(ctx, worker.ReplicatorConfig{
			TemporalAddr: temporalSrv.FrontendAddr(), EtcdEndpoints: cluster.Info().Etcd, Cluster: storeCluster,
			Shard: "s1", ID: "rep-s1", Conn: conn,
		})
		if err != nil {
			t.Fatal(err)
		}
		return r
	}
	rep := startReplicator()
	defer func() { rep.Stop(context.Background()) }()

	id := "reshard-replicator-e2e"
	in := workflows.ReshardInput{Database: "shop", ShardGroup: "data",
		TargetKeyRanges: []workflows.KeyRangeInput{{ShardUID: "t1", End: "80"}, {ShardUID: "t2", Start: "80"}}}
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.ReshardName, in)
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		// Cancel drops the slot and publication; wait for it.
		if err := tc.SignalWorkflow(context.Background(), id, run.GetRunID(), workflows.CancelSignal, nil); err != nil {
			t.Errorf("cancel: %v", err)
		}
		var res workflows.ReshardResult
		if err := run.Get(ctx, &res); err != nil || res.Phase != workflows.PhaseCancelled {
			t.Errorf("after Cancel: phase %q, %v", res.Phase, err)
		}
	}()

	var prog workflows.ReshardProgress
	deadline := time.Now().Add(3 * time.Minute)
	for prog.Phase != workflows.PhaseReadyForCutover {
		if time.Now().After(deadline) {
			t.Fatalf("not ready for cutover: %+v", prog)
		}
		time.Sleep(500 * time.Millisecond)
		prog = reshardProgress(t, ctx, id)
	}
	if prog.Copied["public.customers"] != 2000 || prog.LastDiff == nil || prog.LastDiff.Differences != 0 {
		t.Fatalf("progress %+v", prog)
	}
	ranOn := activityQueues(t, ctx, id)
	t.Logf("activities by task queue: %v", ranOn)
	for name, queues := range ranOn {
		want := queue
		if name == workflows.CopyTablesActivity || name == workflows.StreamChangesActivity {
			want = workflows.ReplicatorQueue("s1")
		}
		for _, q := range queues {
			if q != want {
				t.Errorf("%s scheduled on %q, want %q", name, q, want)
			}
		}
	}
	if len(ranOn[workflows.CopyTablesActivity]) != 1 || len(ranOn[workflows.StreamChangesActivity]) < 2 {
		t.Fatalf("copies and streams scheduled: %v", ranOn)
	}

	// The replicator stops: s1's stream stops with it.
	rep.Stop(ctx)
	if _, err := conns["s1"].Exec(ctx, `INSERT INTO customers VALUES (9001, 'while the replicator was down')`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if n := onTargets(t, ctx, conns, 9001); n != 0 {
		t.Fatalf("customer 9001 reached the targets with s1's replicator stopped (%d rows)", n)
	}
	rep = startReplicator()
	restarted := time.Now()
	eventually(t, 2*time.Minute, "customer 9001 reaches its target after the restart", func() error {
		if n := onTargets(t, ctx, conns, 9001); n != 1 {
			return fmt.Errorf("%d rows of customer 9001 on the targets", n)
		}
		return nil
	})
	t.Logf("the stream resumed %s after the replicator restarted", time.Since(restarted).Round(time.Second))

	// A replicator in a process of its own takes the stream over, and is
	// killed (SIGKILL: no goodbye to Temporal, its registration lingers):
	// the stream resumes once the heartbeat timeout has passed and a
	// replicator of s1 polls again.
	rep.Stop(ctx)
	conns2 := map[string]string{}
	for _, s := range []string{"s1", "t1", "t2"} {
		conns2[s] = pg.ConnConfig(dbOf(s), "")
	}
	child := replicatorProcess(t, replicatorSpec{TemporalAddr: temporalSrv.FrontendAddr(), EtcdEndpoints: cluster.Info().Etcd,
		Cluster: storeCluster, Shard: "s1", ID: "rep-s1-child", ConnStrings: conns2})
	if _, err := conns["s1"].Exec(ctx, `INSERT INTO customers VALUES (9002, 'streamed by the child')`); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "customer 9002 reaches its target through the child replicator", func() error {
		if n := onTargets(t, ctx, conns, 9002); n != 1 {
			return fmt.Errorf("%d rows of customer 9002 on the targets", n)
		}
		return nil
	})
	if err := child.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	child.Wait()
	if _, err := conns["s1"].Exec(ctx, `INSERT INTO customers VALUES (9003, 'after the kill')`); err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	if n := onTargets(t, ctx, conns, 9003); n != 0 {
		t.Fatalf("customer 9003 reached the targets with s1's replicator killed (%d rows)", n)
	}
	rep = startReplicator()
	restarted = time.Now()
	eventually(t, 2*time.Minute, "customer 9003 reaches its target after the kill", func() error {
		if n := onTargets(t, ctx, conns, 9003); n != 1 {
			return fmt.Errorf("%d rows of customer 9003 on the targets", n)
		}
		return nil
	})
	t.Logf("after the SIGKILL the stream resumed %s after a replicator polled again", time.Since(restarted).Round(time.Second))
	if got := activityQueues(t, ctx, id)[workflows.StreamChangesActivity]; len(got) != len(ranOn[workflows.StreamChangesActivity]) {
		t.Errorf("streams scheduled %v after the restarts, were %v: the stream should have been retried, not started anew",
			got, ranOn[workflows.StreamChangesActivity])
	}
}

// replicatorEnv, when set to a JSON replicatorSpec, makes the test binary
// run that replicator until it is killed: a replicator in a process of
// its own.
const replicatorEnv = "TESSERA_E2E_REPLICATOR"

// replicatorSpec is what a replicator process needs; ConnStrings maps a
// shard to its database's connection string (the test's shards are
// databases of one Postgres, without sidecars).
type replicatorSpec struct {
	TemporalAddr  string
	EtcdEndpoints []string
	Cluster       string
	Shard         string
	ID            string
	ConnStrings   map[string]string
	// StopAtFile: as workerSpec's.
	StopAtFile string
}

func runReplicatorProcess(specJSON string) int {
	var spec replicatorSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		log.Print(err)
		return 2
	}
	cfg := worker.ReplicatorConfig{TemporalAddr: spec.TemporalAddr,
		EtcdEndpoints: spec.EtcdEndpoints, Cluster: spec.Cluster, Shard: spec.Shard, ID: spec.ID,
		Conn: actions.ConnectorFunc(func(_ context.Context, shard, _ string) (string, error) {
			if s, ok := spec.ConnStrings[shard]; ok {
				return s, nil
			}
			return "", fmt.Errorf("no connection string for shard %s", shard)
		})}
	if spec.StopAtFile != "" {
		cfg.Interceptors = []interceptor.WorkerInterceptor{&stopAtStep{file: spec.StopAtFile}}
	}
	err := worker.RunReplicator(context.Background(), cfg)
	if err != nil {
		log.Print(err)
		return 1
	}
	return 0
}

// replicatorProcess starts a replicator in a child process and waits
// until it has registered.
func replicatorProcess(t *testing.T, spec replicatorSpec) *exec.Cmd {
	t.Helper()
	cfg, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), replicatorEnv+"="+string(cfg))
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	st, err := store.Dial(context.Background(), spec.EtcdEndpoints, spec.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	eventually(t, 30*time.Second, "the replicator process registers", func() error {
		recs, err := st.ListRecords(context.Background(), store.KindReplicator)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.ID == spec.ID {
				return nil
			}
		}
		return fmt.Errorf("no replicator %s yet", spec.ID)
	})
	return cmd
}

// activityQueues lists, per activity type, the task queue of each
// ActivityTaskScheduled event in the workflow's history.
func activityQueues(t *testing.T, ctx context.Context, id string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	it := tc.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			out[a.ActivityType.Name] = append(out[a.ActivityType.Name], a.TaskQueue.GetName())
		}
	}
	return out
}

// onTargets counts a customer's rows on the targets.
func onTargets(t *testing.T, ctx context.Context, conns map[string]*pgx.Conn, id int64) int64 {
	t.Helper()
	var total int64
	for _, s := range []string{"t1", "t2"} {
		var n int64
		if err := conns[s].QueryRow(ctx, "SELECT count(*) FROM customers WHERE customer_id = $1", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	return total
}
