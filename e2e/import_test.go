package e2e

import (
	"context"
	"errors"
	"os"
	"path/filepath"
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

// TestMoveTablesImportOnRealTemporal imports a table from a plain
// Postgres outside the cluster (a server of its own, reached only by the
// connection string in a secret file) into group archive (a1, a2) on the
// real Temporal server while a writer writes on the external Postgres:
// SwitchTraffic fences the external table (the writer gets 25006), every
// acknowledged write is on the archive shard its key routes to, the
// topology places the table in archive, and Complete leaves the external
// table with its rows and no slot, publication, origin or trigger on any
// instance.
func TestMoveTablesImportOnRealTemporal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	shardsPG, externalPG := reshardPostgres(t, ctx), reshardPostgres(t, ctx)
	dbOf := func(shard string) string { return "shop_" + shard }
	admin, err := pgx.Connect(ctx, shardsPG.ConnConfig("postgres", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	conns := map[string]*pgx.Conn{}
	for _, s := range []string{"a1", "a2"} {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+dbOf(s)); err != nil {
			t.Fatal(err)
		}
		c, err := pgx.Connect(ctx, shardsPG.ConnConfig(dbOf(s), ""))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, `CREATE TABLE customers (customer_id int8 PRIMARY KEY, name text)`); err != nil {
			t.Fatal(err)
		}
		conns[s] = c
	}
	externalDSN := externalPG.ConnConfig("postgres", "")
	ext, err := pgx.Connect(ctx, externalDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer ext.Close(context.Background())
	if _, err := ext.Exec(ctx, `CREATE TABLE customers (customer_id int8 PRIMARY KEY, name text);
		INSERT INTO customers SELECT i, 'c' || i FROM generate_series(1, 5000) i`); err != nil {
		t.Fatal(err)
	}
	secretDir, err := os.MkdirTemp("", "e2e-import-secret-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(secretDir)
	secret := filepath.Join(secretDir, "legacy.dsn")
	if err := os.WriteFile(secret, []byte(externalDSN+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}

	st, err := store.Dial(ctx, cluster.Info().Etcd, "import-e2e")
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
	for _, s := range []string{"a1", "a2"} {
		if _, err := st.UpdateShardState(ctx, s, func(ss *store.ShardState) error { ss.Primary = s + "-0"; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	const queue = "import-e2e"
	w := sdkworker.New(tc, queue, sdkworker.Options{})
	workflows.Register(w, storeActivities(st))
	acts := &actions.Actions{Store: st, Conn: actions.ConnectorFunc(func(_ context.Context, shard, _ string) (string, error) {
		return shardsPG.ConnConfig(dbOf(shard), ""), nil
	})}
	acts.Register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	in := workflows.MoveTablesInput{Database: "shop", Tables: []string{"public.customers"}, TargetShardGroup: "archive",
		Source: &workflows.ExternalSource{ConnSecret: secret}}
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: workflows.MoveTablesID("shop", "archive") + "-import", TaskQueue: queue},
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
	go func() { writerDone <- writer.run(writes, ext) }()

	var prog workflows.ReshardProgress
	deadline := time.Now().Add(3 * time.Minute)
	for prog.Phase != workflows.PhaseReadyForCutover {
		if time.Now().After(deadline) {
			t.Fatalf("not ready for cutover: %+v", prog)
		}
		time.Sleep(500 * time.Millisecond)
		prog = reshardProgress(t, ctx, run.GetID())
	}
	t.Logf("import ready for cutover after %d writes: %+v", writer.acked(), prog)
	if prog.Copied["public.customers"] < 5000 || prog.LastDiff == nil || prog.LastDiff.Differences != 0 {
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
	t.Logf("import cutover: %d acknowledged writes; write pause %s", writer.acked(), prog.Cutover.WritePause())

	snap, err := st.GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	placement := snap.Topology.Resolve("shop", "public", "customers")
	if placement.Group.UID != "archive" {
		t.Fatalf("customers in %s after the import's switch", placement.Group.UID)
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

	handle, err := tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: run.GetID(), UpdateName: workflows.CompleteUpdate,
		WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = handle.Get(ctx, nil)
	}
	if err != nil {
		t.Fatalf("Complete: %v", err)
	}
	var res workflows.ReshardResult
	if err := run.Get(ctx, &res); err != nil || res.Phase != workflows.PhaseCompleted {
		t.Fatalf("result %+v, %v", res, err)
	}
	key := workflows.MoveTablesKey(run.GetID())
	conns["external"] = ext
	for name, c := range conns {
		for what, sql := range map[string]string{
			"slots":        "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1 || '%'",
			"publications": "SELECT count(*) FROM pg_publication WHERE pubname LIKE $1 || '%'",
			"origins":      "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'tessera_' || $1 || '%'",
			"triggers":     "SELECT count(*) FROM pg_trigger WHERE tgname LIKE $1 || '%'",
		} {
			var n int64
			if err := c.QueryRow(ctx, sql, key).Scan(&n); err != nil || n != 0 {
				t.Errorf("after Complete: %d %s of the import on %s (%v)", n, what, name, err)
			}
		}
	}
	var kept int64
	if err := ext.QueryRow(ctx, "SELECT count(*) FROM customers").Scan(&kept); err != nil || kept == 0 {
		t.Fatalf("after Complete: the external table has %d rows (%v): it must stay", kept, err)
	}
}
