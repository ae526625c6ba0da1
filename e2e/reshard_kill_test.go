package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/replicator/actions"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// replicatorWorkerEnv, when set to a JSON replicatorWorkerSpec, makes the
// test binary run the Reshard workflow and the Replicator's activities on
// a task queue until it is killed.
const replicatorWorkerEnv = "TESSERA_E2E_REPLICATOR_WORKER"

type replicatorWorkerSpec struct {
	TemporalAddr  string
	EtcdEndpoints []string
	StoreCluster  string
	Queue         string
	ConnStrings   map[string]string // by shard
	CopyBatchRows int
}

func runReplicatorWorkerProcess(specJSON string) int {
	var spec replicatorWorkerSpec
	if err := json.Unmarshal([]byte(specJSON), &spec); err != nil {
		log.Print(err)
		return 2
	}
	ctx := context.Background()
	st, err := store.Dial(ctx, spec.EtcdEndpoints, spec.StoreCluster)
	if err != nil {
		log.Print(err)
		return 1
	}
	c, err := client.Dial(client.Options{HostPort: spec.TemporalAddr, Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		log.Print(err)
		return 1
	}
	// Heartbeats sent each second, as Tessera's workers send them: the
	// copy's 5 s heartbeat timeout leaves the SDK's default throttle (0.8
	// of it) little slack on a loaded machine.
	w := sdkworker.New(c, spec.Queue, sdkworker.Options{MaxHeartbeatThrottleInterval: time.Second})
	workflows.Register(w, storeActivities(st))
	acts := &actions.Actions{Store: st, CopyBatchRows: spec.CopyBatchRows,
		Conn: actions.ConnectorFunc(func(_ context.Context, shard, _ string) (string, error) {
			if u, ok := spec.ConnStrings[shard]; ok {
				return u, nil
			}
			return "", fmt.Errorf("no shard %s", shard)
		})}
	acts.Register(w)
	if err := w.Run(sdkworker.InterruptCh()); err != nil {
		log.Print(err)
		return 1
	}
	return 0
}

// TestReshardCopySurvivesKilledWorkers kills (SIGKILL) the worker process
// running a reshard's copy twice: at about a third of the copy, and in its
// last batch. The Replicator is not a process of its own yet: its
// activities run in the worker, so killing the worker kills both. Each
// kill is placed exactly with locks the copy must wait for: first an
// uncommitted row on t1 at a third of the keys, which the batch bringing
// that key waits for (a unique-key conflict), so that the batch in flight
// is committed nowhere; then the same on t2 at the last key t2 receives,
// and t2's progress row locked, so that t1 commits the last batch and t2
// does not. A new worker resumes each time;
// the reshard reaches ready_for_cutover with a clean VDiff under updates,
// and the targets' copy counters show every batch committed once per
// target and one batch read again for t2 (the one t1 already held).
func TestReshardCopySurvivesKilledWorkers(t *testing.T) {
	const (
		rows      = 60500
		batchRows = 1000
		// An uninterrupted copy reads 60 full batches and one of 500 rows.
		wholeCopy = 61
		table     = "public.customers"
	)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	// The source on an instance of its own: creating a logical slot waits
	// for every transaction of its instance, the test's blocking ones on
	// the targets included.
	srcPG, targetPG := reshardPostgres(t, ctx), reshardPostgres(t, ctx)
	dbOf := func(shard string) string { return "shop_" + shard }
	admin, err := pgx.Connect(ctx, targetPG.ConnConfig("postgres", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	srcAdmin, err := pgx.Connect(ctx, srcPG.ConnConfig("postgres", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer srcAdmin.Close(context.Background())
	conns := map[string]*pgx.Conn{}
	urls := map[string]string{}
	for _, s := range []string{"s1", "t1", "t2"} {
		pg, a := targetPG, admin
		if s == "s1" {
			pg, a = srcPG, srcAdmin
		}
		if _, err := a.Exec(ctx, "CREATE DATABASE "+dbOf(s)); err != nil {
			t.Fatal(err)
		}
		urls[s] = pg.ConnConfig(dbOf(s), "")
		c, err := pgx.Connect(ctx, urls[s])
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, `CREATE TABLE customers (customer_id int8 PRIMARY KEY, name text, score int4, seen timestamptz)`); err != nil {
			t.Fatal(err)
		}
		conns[s] = c
	}
	src := conns["s1"]
	if _, err := src.Exec(ctx, `INSERT INTO customers SELECT i, 'c' || i, CASE WHEN i % 4 = 0 THEN NULL ELSE i % 1000 END,
		now() - i * interval '1 minute' FROM generate_series(1, $1::int8) i`, rows); err != nil {
		t.Fatal(err)
	}

	const storeCluster = "reshard-kill-e2e"
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
	ranges := []workflows.KeyRangeInput{{ShardUID: "t1", End: "80"}, {ShardUID: "t2", Start: "80"}}
	target, err := topo.Parse([]byte(`{
	  "authoritative_shard_group": "main",
	  "shard_indexes": {"customer_xx": {"type": "xxhash", "columns": ["customer_id"]}},
	  "shard_groups": [
	    {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
	    {"uid": "data", "default_shard_index": "customer_xx",
	     "key_ranges": [{"shard_uid": "t1", "end": "80"}, {"shard_uid": "t2", "start": "80"}]}
	  ],
	  "databases": {"shop": {"default_shard_group": "data"}}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	placement := target.Resolve("shop", "public", "customers")
	// keyOn returns the first key from `from` on, going by step, that the
	// target topology places on shard.
	keyOn := func(shard string, from, step int64) int64 {
		for k := from; k >= 1 && k <= rows; k += step {
			if _, s, err := placement.RouteInt(k); err != nil {
				t.Fatal(err)
			} else if s == shard {
				return k
			}
		}
		t.Fatalf("no key on %s", shard)
		return 0
	}

	const queue = "reshard-kill"
	spec, _ := json.Marshal(replicatorWorkerSpec{TemporalAddr: temporalSrv.FrontendAddr(), EtcdEndpoints: cluster.Info().Etcd,
		StoreCluster: storeCluster, Queue: queue, ConnStrings: urls, CopyBatchRows: batchRows})
	startWorker := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), replicatorWorkerEnv+"="+string(spec))
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			cmd.Process.Kill()
			cmd.Wait()
		})
		return cmd
	}
	// block holds, uncommitted on a target, a row with the key a batch
	// will bring: that batch's COPY waits for it.
	block := func(shard string, key int64) pgx.Tx {
		tx, err := conns[shard].Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, "INSERT INTO customers (customer_id, name) VALUES ($1, 'blocker')", key); err != nil {
			t.Fatal(err)
		}
		return tx
	}
	// sessions lists what the test instance's sessions are doing, for a
	// failure to show.
	sessions := func() []string {
		rows, err := admin.Query(ctx, `SELECT datname || ' ' || state || ' ' || coalesce(wait_event_type, '-') || ' ' || left(query, 50)
			FROM pg_stat_activity WHERE datname LIKE 'shop_%'`)
		if err != nil {
			return []string{err.Error()}
		}
		out, _ := pgx.CollectRows(rows, pgx.RowTo[string])
		return out
	}
	// waitBlocked waits until a statement of the copy starting with
	// prefix waits for a lock on shard.
	waitBlocked := func(shard, prefix string) {
		eventually(t, 2*time.Minute, "the copy waits on "+shard, func() error {
			var n int
			if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity
				WHERE datname = $1 AND wait_event_type = 'Lock' AND query LIKE $2`, dbOf(shard), prefix+"%").Scan(&n); err != nil {
				return err
			}
			if n == 0 {
				return fmt.Errorf("no %s... waits on %s; sessions: %v", prefix, shard, sessions())
			}
			return nil
		})
	}
	kill := func(w *exec.Cmd) {
		if err := w.Process.Kill(); err != nil {
			t.Fatal(err)
		}
		w.Wait()
	}
	release := func(tx pgx.Tx) {
		if err := tx.Rollback(ctx); err != nil {
			t.Fatal(err)
		}
	}
	counters := func(shard, key string) replicator.CopyCounters {
		c, err := replicator.ReadCopyCounters(ctx, conns[shard], key, "s1", table)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}

	first := block("t1", keyOn("t1", rows/3, 1))
	w := startWorker()
	id := "reshard-kill-shop-data"
	key := workflows.ReshardKey(id)
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: queue}, workflows.ReshardName,
		workflows.ReshardInput{Database: "shop", ShardGroup: "data", TargetKeyRanges: ranges})
	if err != nil {
		t.Fatal(err)
	}
	// Updates all along: the stream must carry them over the kills.
	writes, stopWrites := context.WithCancel(ctx)
	defer stopWrites()
	wrote := make(chan int, 1)
	// A connection of the writer's own: cancelling a statement closes it.
	writer, err := pgx.Connect(ctx, urls["s1"])
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(context.Background())
	go func() {
		n := 0
		for ; writes.Err() == nil; n++ {
			if _, err := writer.Exec(writes, `UPDATE customers SET score = coalesce(score, 0) + 1, seen = now() WHERE customer_id = $1`, n*7919%rows+1); err != nil {
				break
			}
			time.Sleep(2 * time.Millisecond)
		}
		wrote <- n
	}()

	waitBlocked("t1", "COPY")
	kill(w)
	release(first)
	c1, c2 := counters("t1", key), counters("t2", key)
	t.Logf("killed at a third: t1 %+v, t2 %+v", c1, c2)
	if c1.Batches < wholeCopy/4 || c1.Batches > wholeCopy/2 || c2.Batches != c1.Batches || c1.Done {
		t.Fatalf("the first kill was not at about a third of the copy, both targets even: t1 %+v, t2 %+v", c1, c2)
	}

	// The last key t2 receives is in the copy's last batch: its COPY on
	// t2 waits there. The targets commit a batch one after the other once
	// every COPY is over, so with t2's progress row locked meanwhile, t1
	// commits the last batch and t2 waits to.
	second := block("t2", keyOn("t2", rows, -1))
	w = startWorker()
	waitBlocked("t2", "COPY")
	lockConn, err := pgx.Connect(ctx, urls["t2"])
	if err != nil {
		t.Fatal(err)
	}
	defer lockConn.Close(context.Background())
	progressLock, err := lockConn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := progressLock.Exec(ctx, "SELECT FROM _tessera.copy_progress WHERE workflow = $1 FOR UPDATE", key); err != nil {
		t.Fatal(err)
	}
	release(second)
	waitBlocked("t2", "INSERT INTO _tessera.copy_progress")
	kill(w)
	release(progressLock)
	c1, c2 = counters("t1", key), counters("t2", key)
	t.Logf("killed in the last batch: t1 %+v, t2 %+v", c1, c2)
	if !c1.Done || c1.Batches != wholeCopy || c2.Done || c2.Batches != wholeCopy-1 {
		t.Fatalf("the second kill was not in the last batch between t1's and t2's commits: t1 %+v, t2 %+v", c1, c2)
	}

	startWorker()
	var prog workflows.ReshardProgress
	deadline := time.Now().Add(4 * time.Minute)
	for prog.Phase != workflows.PhaseReadyForCutover {
		if time.Now().After(deadline) {
			t.Fatalf("not ready for cutover: %+v", prog)
		}
		time.Sleep(500 * time.Millisecond)
		v, err := tc.QueryWorkflow(ctx, run.GetID(), "", workflows.ProgressQuery)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Get(&prog); err != nil {
			t.Fatal(err)
		}
	}
	stopWrites()
	t.Logf("ready for cutover after %d updates: %+v", <-wrote, prog)
	if prog.LastDiff == nil || !prog.LastDiff.Done || prog.LastDiff.Differences != 0 {
		t.Fatalf("VDiff: %+v", prog.LastDiff)
	}
	if prog.Copied[table] != rows {
		t.Fatalf("the progress query says %d rows copied of %s, want %d", prog.Copied[table], table, rows)
	}

	var held int64
	for _, shard := range []string{"t1", "t2"} {
		c := counters(shard, key)
		var n int64
		if err := conns[shard].QueryRow(ctx, "SELECT count(*) FROM customers").Scan(&n); err != nil {
			t.Fatal(err)
		}
		held += n
		// Every batch committed once on each target. t1 wrote in the
		// first two attempts (it was done before the third); t2 in all
		// three, the third reading for it alone the last batch, which t1
		// already held: the one batch read twice.
		wantStretches, wantReread := 2, int64(0)
		if shard == "t2" {
			wantStretches, wantReread = 3, 1
		}
		t.Logf("%s: %+v, %d rows held", shard, c, n)
		if c.Stretches != wantStretches || c.Batches != wholeCopy || c.Rows != n || c.RereadBatches != wantReread || !c.Done {
			t.Fatalf("%s: counters %+v with %d rows held: want %d stretches, %d batches, %d rows, %d reread, done",
				shard, c, n, wantStretches, wholeCopy, n, wantReread)
		}
	}
	if held != rows {
		t.Fatalf("the targets hold %d rows, the source %d", held, rows)
	}

	if err := tc.SignalWorkflow(ctx, run.GetID(), "", workflows.CancelSignal, nil); err != nil {
		t.Fatal(err)
	}
	var res workflows.ReshardResult
	if err := run.Get(ctx, &res); err != nil || res.Phase != workflows.PhaseCancelled {
		t.Fatalf("after Cancel: %+v, %v", res, err)
	}
	var slots int64
	if err := src.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots").Scan(&slots); err != nil || slots != 0 {
		t.Fatalf("after Cancel: %d slots on the source (%v)", slots, err)
	}
}
