package e2e

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/workflows"
)

// shadowSeedRows is how many rows each writer seeds per table.
const shadowSeedRows = 5000

// TestOnlineDDLShadowPathThroughRouter runs a rewrite of a table on the
// shadow path (ALTER COLUMN name TYPE varchar(200), on every shard that
// holds the table) while clients write to it through the router
// (inserts, updates, deletes, re-inserts, NULLs, payloads over 2 kB that
// updates leave unchanged): afterwards every shard has the new type, the
// rows through the router and on each shard are exactly what the clients'
// acknowledged writes left, no client statement failed, and nothing of
// the migration (slot, publication, origin, shadow or old table) is left.
// Each writer's longest pause is logged, with each shard's lock time.
func TestOnlineDDLShadowPathThroughRouter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rc := startReshardCluster(t, ctx)
	hold := &sync.RWMutex{}
	clients := make([]*reshardClient, reshardWriters)
	var seedRows [3][][]any
	for i := range clients {
		clients[i] = newReshardClient(i, rc.routerConn(t, ctx), hold)
		rows := clients[i].seed(shadowSeedRows)
		for tb := range rows {
			seedRows[tb] = append(seedRows[tb], rows[tb]...)
		}
	}
	src := rc.direct(t, ctx, "shard-1")
	for tb, rows := range seedRows {
		if _, err := src.CopyFrom(ctx, pgx.Identifier{shardTables[tb].name}, []string{"id", "name", "note", "payload"}, textRows(rows)); err != nil {
			t.Fatal(err)
		}
	}
	writing, stopWriting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); c.run(writing) }()
	}
	defer func() { stopWriting(); wg.Wait() }()
	time.Sleep(2 * time.Second)

	const sql = "ALTER TABLE accounts ALTER COLUMN name TYPE varchar(200)"
	in := workflows.OnlineDDLInput{Database: "shop", SQL: sql}
	id := workflows.OnlineDDLID("shop", "public", "accounts")
	started := time.Now()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.OnlineDDLName, in)
	if err != nil {
		t.Fatal(err)
	}
	var res workflows.OnlineDDLResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("the migration failed: %v", err)
	}
	took := time.Since(started)
	time.Sleep(2 * time.Second) // writes after the swap
	// Compared while the writers wait between statements: one cut off
	// by stopping them would leave a row no acknowledged write made.
	rc.checkRows(t, ctx, hold, clients, "after the shadow path")
	stopWriting()
	wg.Wait()
	if res.Phase != workflows.PhaseDone || res.Plan == nil || res.Plan.Path != workflows.PathShadow || len(res.Shards) < 2 ||
		res.SchemaCheck == nil || len(res.SchemaCheck.Differences) != 0 {
		t.Fatalf("result: %+v", res.OnlineDDLProgress)
	}
	t.Logf("%s on %d shards took %s", sql, len(res.Shards), took.Round(time.Millisecond))
	for _, s := range res.Shards {
		t.Logf("shard %s: %s, %d rows copied, the swap held the lock %.1f ms, %d attempts", s.Shard, s.Shadow, s.Rows, s.Millis, s.Attempts)
		if s.Shadow != workflows.ShadowCompleted {
			t.Errorf("shard %s: %s, want completed", s.Shard, s.Shadow)
		}
	}
	total := 0
	for _, c := range clients {
		total += c.acked
		for _, e := range c.errs {
			t.Errorf("writer %d: %s", c.id, e)
		}
		for _, a := range c.anomalies {
			t.Errorf("writer %d: %s", c.id, a)
		}
		t.Logf("writer %d: %d acknowledged writes, longest pause %s", c.id, c.acked, c.maxGap.Round(time.Millisecond))
	}
	t.Logf("%d acknowledged writes through the router, none lost", total)
	// The shards of the topology hold the table (the others, kept for
	// reshards, are not part of the database).
	for _, st := range res.Shards {
		s := st.Shard
		conn := rc.direct(t, ctx, s)
		var typ string
		var left int64
		err := conn.QueryRow(ctx, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute WHERE attrelid = 'accounts'::regclass AND attname = 'name'`).Scan(&typ)
		if err != nil || typ != "character varying(200)" {
			t.Errorf("%s: accounts.name is %q (%v)", s, typ, err)
		}
		err = conn.QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots) + (SELECT count(*) FROM pg_publication)
			+ (SELECT count(*) FROM pg_replication_origin) + (SELECT count(*) FROM pg_class WHERE relname LIKE '\_tessera\_shadow\_%' OR relname LIKE '\_tessera\_old\_%')`).Scan(&left)
		if err != nil || left != 0 {
			t.Errorf("%s: %d slots, publications, origins or tables of the migration left (%v)", s, left, err)
		}
	}
}
