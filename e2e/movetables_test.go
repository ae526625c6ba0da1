package e2e

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/sdk/client"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/replicator/actions"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// moveTopology puts shop in group "data" on shard s1, and has a group
// "archive" split over a1 and a2; the test moves customers there and
// leaves notes behind.
const moveTopology = `{
  "authoritative_shard_group": "main",
  "shard_indexes": {"customer_xx": {"type": "xxhash", "columns": ["customer_id"]}},
  "shard_groups": [
    {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
    {"uid": "data", "key_ranges": [{"shard_uid": "s1"}]},
    {"uid": "archive", "default_shard_index": "customer_xx", "key_ranges": [{"shard_uid": "a1", "end": "80"}, {"shard_uid": "a2", "start": "80"}]}
  ],
  "databases": {"shop": {"default_shard_group": "data"}}
}`

// TestMoveTablesOnRealTemporal runs the MoveTables workflow on the real
// Temporal server with the Replicator's real activities against real
// Postgres (a Postgres of its own; each shard is a database of it) and a
// topology service of its own in the cluster's etcd: customers moves
// from group data (s1) to group archive (a1, a2) while a writer writes
// on s1; SwitchTraffic stops the writer with the fence's 25006, every
// acknowledged write is on the archive shard its key routes to, the
// topology places customers in archive and notes still in data, a write
// on an archive shard is carried back to s1 until Complete, and Complete
// drops customers from s1 (notes stay) and leaves no slot, publication,
// origin or trigger on any instance.
func TestMoveTablesOnRealTemporal(t *testing.T) {
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
	for _, s := range []string{"s1", "a1", "a2"} {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+dbOf(s)); err != nil {
			t.Fatal(err)
		}
		c, err := pgx.Connect(ctx, pg.ConnConfig(dbOf(s), ""))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		// The operator creates the moved table on the target shards.
		if _, err := c.Exec(ctx, `CREATE TABLE customers (customer_id int8 PRIMARY KEY, name text)`); err != nil {
			t.Fatal(err)
		}
		conns[s] = c
	}
	src := conns["s1"]
	if _, err := src.Exec(ctx, `INSERT INTO customers SELECT i, 'c' || i FROM generate_series(1, 5000) i;
		CREATE TABLE notes (id int8 PRIMARY KEY, note text); INSERT INTO notes VALUES (1, 'stays in data')`); err != nil {
		t.Fatal(err)
	}

	st, err := store.Dial(ctx, cluster.Info().Etcd, "movetables-e2e")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	top, err := topo.Parse([]byte(moveTopology))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyTopology(ctx, top, store.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "a1", "a2"} {
		if _, err := st.UpdateShardState(ctx, s, func(ss *store.ShardState) error { ss.Primary = s + "-0"; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	const queue = "movetables-e2e"
	w := sdkworker.New(tc, queue, sdkworker.Options{})
	workflows.Register(w, storeActivities(st))
	acts := &actions.Actions{Store: st, Conn: actions.ConnectorFunc(func(_ context.Context, shard, _ string) (string, error) {
		return pg.ConnConfig(dbOf(shard), ""), nil
	})}
	acts.Register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	in := workflows.MoveTablesInput{Database: "shop", Tables: []string{"public.customers"}, TargetShardGroup: "archive"}
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.MoveTablesID("shop", "archive"), TaskQueue: queue},
		workflows.MoveTablesName, in)
	if err != nil {
		t.Fatal(err)
	}
	writes, stopWrites := context.WithCancel(ctx)
	defer stopWrites()
	writer := &reshardWriter{want: map[int64]string{}, next: 5001}
	for i := int64(1); i <= 5000; i++ {
		writer.want[i] = "c" + strconv.FormatInt(i, 10)
	}
	writerDone := make(chan error, 1)
	go func() { writerDone <- writer.run(writes, src) }()

	var prog workflows.ReshardProgress
	deadline := time.Now().Add(3 * time.Minute)
	for prog.Phase != workflows.PhaseReadyForCutover {
		if time.Now().After(deadline) {
			t.Fatalf("not ready for cutover: %+v", prog)
		}
		time.Sleep(500 * time.Millisecond)
		prog = reshardProgress(t, ctx, run.GetID())
	}
	t.Logf("ready for cutover after %d writes: %+v", writer.acked(), prog)
	if prog.Copied["public.customers"] < 5000 || prog.LastDiff == nil || !prog.LastDiff.Done || prog.LastDiff.Differences != 0 {
		t.Fatalf("progress %+v", prog)
	}

	switchStart := time.Now()
	cutoverUpdate(t, ctx, run.GetID(), workflows.SwitchTrafficUpdate)
	t.Logf("SwitchTraffic returned after %s", time.Since(switchStart))
	select {
	case err := <-writerDone:
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) || pgErr.Code != pgerr.ReadOnlySQLTransaction || !strings.HasPrefix(pgErr.Message, pgerr.CutoverFencePrefix) {
			t.Fatalf("the writer stopped with %v, want the fence's 25006", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the writer was not stopped by the fence")
	}
	prog = reshardProgress(t, ctx, run.GetID())
	if prog.Phase != workflows.PhaseSwitched || prog.Cutover == nil {
		t.Fatalf("after SwitchTraffic: %+v", prog)
	}
	t.Logf("cutover: %d acknowledged writes; write pause (fence to topology switch) %s; table buffer held %s; topology revision %d",
		writer.acked(), prog.Cutover.WritePause(), prog.Cutover.BufferHeld(), prog.Cutover.Revision)
	logCutoverSteps(t, ctx, run.GetID())

	snap, err := st.GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	placement := snap.Topology.Resolve("shop", "public", "customers")
	if snap.Revision != prog.Cutover.Revision || placement.Group.UID != "archive" || snap.Topology.Resolve("shop", "public", "notes").Group.UID != "data" {
		t.Fatalf("topology revision %d: customers in %s, notes in %s", snap.Revision, placement.Group.UID, snap.Topology.Resolve("shop", "public", "notes").Group.UID)
	}
	onTarget := map[string]map[int64]string{"a1": {}, "a2": {}}
	for shard, rows := range onTarget {
		r, err := conns[shard].Query(ctx, "SELECT customer_id, name FROM customers")
		if err != nil {
			t.Fatal(err)
		}
		for r.Next() {
			var id int64
			var name string
			if err := r.Scan(&id, &name); err != nil {
				t.Fatal(err)
			}
			rows[id] = name
		}
		if r.Err() != nil {
			t.Fatal(r.Err())
		}
	}
	for id, name := range writer.want {
		_, shard, err := placement.RouteInt(id)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := onTarget[shard][id]
		if name == "" && ok {
			t.Fatalf("customer %d was deleted (acknowledged) but is on %s", id, shard)
		}
		if name != "" && got != name {
			t.Fatalf("customer %d on %s is %q (present %v), want %q", id, shard, got, ok, name)
		}
		delete(onTarget[shard], id)
	}
	for shard, rows := range onTarget {
		if len(rows) != 0 {
			t.Fatalf("%d rows on %s that no acknowledged write left there", len(rows), shard)
		}
	}
	if _, err := src.Exec(ctx, `INSERT INTO notes VALUES (2, 'data still takes writes')`); err != nil {
		t.Fatalf("a write to a table that stays: %v", err)
	}

	// Until Complete, a write on the archive is carried back to s1.
	_, onA, err := placement.RouteInt(777777)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conns[onA].Exec(ctx, `INSERT INTO customers VALUES (777777, 'written on the archive')`); err != nil {
		t.Fatal(err)
	}
	waitForRow(t, ctx, src, 777777)

	handle, err := tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), UpdateName: workflows.CompleteUpdate,
		WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = handle.Get(ctx, nil)
	}
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	var res workflows.ReshardResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if res.Phase != workflows.PhaseCompleted {
		t.Fatalf("result %+v", res)
	}
	key := workflows.MoveTablesKey(run.GetID())
	for shard, c := range conns {
		for what, sql := range map[string]string{
			"slots":        "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1 || '%'",
			"publications": "SELECT count(*) FROM pg_publication WHERE pubname LIKE $1 || '%'",
			"origins":      "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'tessera_' || $1 || '%'",
			"triggers":     "SELECT count(*) FROM pg_trigger WHERE tgname LIKE $1 || '%'",
		} {
			var n int64
			if err := c.QueryRow(ctx, sql, key).Scan(&n); err != nil || n != 0 {
				t.Errorf("after Complete: %d %s of the move on %s (%v)", n, what, shard, err)
			}
		}
	}
	var customersLeft, notes int64
	if err := src.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relname = 'customers'").Scan(&customersLeft); err != nil || customersLeft != 0 {
		t.Fatalf("after Complete: customers is still on s1 (%v)", err)
	}
	if err := src.QueryRow(ctx, "SELECT count(*) FROM notes").Scan(&notes); err != nil || notes != 2 {
		t.Fatalf("after Complete: %d notes on s1 (%v)", notes, err)
	}
}
