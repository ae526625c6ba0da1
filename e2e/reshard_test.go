package e2e

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/replicator/actions"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// reshardTopology puts shop in group "data" on shard s1; the test splits
// it over t1 and t2.
const reshardTopology = `{
  "authoritative_shard_group": "main",
  "shard_indexes": {"customer_xx": {"type": "xxhash", "columns": ["customer_id"]}},
  "shard_groups": [
    {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
    {"uid": "data", "default_shard_index": "customer_xx", "key_ranges": [{"shard_uid": "s1"}]}
  ],
  "databases": {"shop": {"default_shard_group": "data"}}
}`

// TestReshardOnRealTemporal runs the Reshard workflow on the real Temporal
// server with the Replicator's real activities against real Postgres (a
// Postgres of its own; each shard is a database of it) and a topology
// service of its own in the cluster's etcd: copy, catch-up under writes,
// VDiff, SwitchTraffic refused, Cancel leaving no slot behind.
func TestReshardOnRealTemporal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pg := reshardPostgres(t, ctx)
	dbOf := func(shard string) string { return "shop_" + shard }
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
	src := conns["s1"]
	if _, err := src.Exec(ctx, `INSERT INTO customers SELECT i, 'c' || i FROM generate_series(1, 5000) i`); err != nil {
		t.Fatal(err)
	}

	st, err := store.Dial(ctx, cluster.Info().Etcd, "reshard-e2e")
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

	// A worker of its own on a task queue of its own, so the cluster's
	// workers (without these credentials) do not take its tasks.
	const queue = "reshard-e2e"
	w := sdkworker.New(tc, queue, sdkworker.Options{})
	workflows.Register(w, nil)
	acts := &actions.Actions{Store: st, Conn: actions.ConnectorFunc(func(_ context.Context, shard, _ string) (string, error) {
		return pg.ConnConfig(dbOf(shard), ""), nil
	})}
	acts.Register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	in := workflows.ReshardInput{Database: "shop", ShardGroup: "data",
		TargetKeyRanges: []workflows.KeyRangeInput{{ShardUID: "t1", End: "80"}, {ShardUID: "t2", Start: "80"}}}
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.ReshardID("shop", "data"), TaskQueue: queue},
		workflows.ReshardName, in)
	if err != nil {
		t.Fatal(err)
	}
	// Writes while it copies and streams.
	writes, stopWrites := context.WithCancel(ctx)
	defer stopWrites()
	wrote := make(chan int, 1)
	go func() {
		n := 0
		for ; writes.Err() == nil; n++ {
			if _, err := src.Exec(writes, `UPDATE customers SET name = name || '+' WHERE customer_id = $1`, n%5000+1); err != nil {
				break
			}
		}
		wrote <- n
	}()

	var prog workflows.ReshardProgress
	deadline := time.Now().Add(3 * time.Minute)
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
	if prog.Copied["public.customers"] != 5000 || prog.LastDiff == nil || !prog.LastDiff.Done || prog.LastDiff.Differences != 0 {
		t.Fatalf("progress %+v", prog)
	}
	var n1, n2 int64
	conns["t1"].QueryRow(ctx, "SELECT count(*) FROM customers").Scan(&n1)
	conns["t2"].QueryRow(ctx, "SELECT count(*) FROM customers").Scan(&n2)
	if n1+n2 != 5000 || n1 == 0 || n2 == 0 {
		t.Fatalf("targets hold %d and %d rows", n1, n2)
	}

	handle, err := tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), UpdateName: workflows.SwitchTrafficUpdate,
		WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = handle.Get(ctx, nil)
	}
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != pgerr.FeatureNotSupported {
		t.Fatalf("SwitchTraffic: %v", err)
	}

	if err := tc.SignalWorkflow(ctx, run.GetID(), "", workflows.CancelSignal, nil); err != nil {
		t.Fatal(err)
	}
	var res workflows.ReshardResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.Phase != workflows.PhaseCancelled {
		t.Fatalf("result %+v", res)
	}
	var slots, pubs int64
	src.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots").Scan(&slots)
	src.QueryRow(ctx, "SELECT count(*) FROM pg_publication").Scan(&pubs)
	if slots != 0 || pubs != 0 {
		t.Fatalf("after Cancel: %d slots, %d publications on the source", slots, pubs)
	}
}

// reshardPostgres starts a Postgres of the test's own, stopped at its end.
func reshardPostgres(t *testing.T, ctx context.Context) *pgmanager.Instance {
	t.Helper()
	dir, err := os.MkdirTemp("", "e2e-reshard-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(dir, 0o755)
	t.Cleanup(func() { os.RemoveAll(dir) })
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	inst, err := pgmanager.New(pgmanager.Config{InstanceID: "e2e-reshard", Dir: filepath.Join(dir, "pg"), Port: port,
		Settings: map[string]string{"max_connections": "60", "fsync": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := inst.Close(context.Background()); err != nil {
			slog.Error("stopping the reshard test's postgres", "err", err)
		}
	})
	if err := inst.InitPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inst.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return inst
}
