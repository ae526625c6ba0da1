package actions

import (
	"context"
	"encoding/json"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
	"github.com/tesseradb/tessera/workflows"
)

// writeSecret writes a connection string to a file only its owner reads.
func writeSecret(t *testing.T, conn string) string {
	path := filepath.Join(t.TempDir(), "import.dsn")
	if err := os.WriteFile(path, []byte(conn+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestImportActivities imports orders from an external Postgres (here a
// database the topology does not know, reached only by the connection
// string in a secret file) into group data (s1, s2), with the activities
// in the workflow's order: the plan, copy, stream under writes, VDiff,
// fence of the external table, switch (orders gets its own entry in
// data), reverse streams back to the external Postgres, and Complete,
// which leaves the external table and its rows and no slot, publication,
// origin or trigger anywhere.
func TestImportActivities(t *testing.T) {
	ctx := testCtx(t)
	st, err := store.Dial(ctx, etcdembed.Start(t), "import")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	top := parseMoveTopology(t)
	if _, err := st.ApplyTopology(ctx, top, store.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "s2"} {
		if _, err := st.UpdateShardState(ctx, s, func(ss *store.ShardState) error { ss.Primary = s + "-0"; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	ordersDDL := `CREATE TABLE public.orders (id bigserial, customer_id int8 NOT NULL, note text, PRIMARY KEY (customer_id, id))`
	a := &Actions{Store: st, Conn: createShards(t, "imp", ordersDDL, "s1", "s2")}
	createShards(t, "imp", ordersDDL, "ext")
	dsn := testPostgres(t).ConnConfig(shardDB("imp", "ext"), "")
	ext, s1, s2 := connect(t, dsn), shardConn(t, "imp", "s1"), shardConn(t, "imp", "s2")
	mustExec(t, ext, `INSERT INTO orders (customer_id, note) SELECT i % 97, 'order ' || i FROM generate_series(1, 2000) i`)

	in := moveInput([]string{"orders"}, "data")
	in.Input.Source = &workflows.ExternalSource{ConnSecret: writeSecret(t, dsn)}
	plan, err := a.PlanMoveTables(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(plan)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(string(raw), dsn) || !plan.Imports() || len(plan.Sources) != 1 || plan.Sources[0] != workflows.ImportSourceShard ||
		len(plan.Targets) != 2 || plan.Tables[0].ShardColumn != "customer_id" {
		t.Fatalf("plan %s", raw)
	}

	src := workflows.SourceInput{Plan: plan, Source: workflows.ImportSourceShard}
	if _, err := a.CopyTables(ctx, src); err != nil {
		t.Fatal(err)
	}
	total := func(sql string) int64 { return count(t, s1, sql) + count(t, s2, sql) }
	if n := total("SELECT count(*) FROM orders"); n != 2000 {
		t.Fatalf("%d orders imported", n)
	}
	if count(t, s1, "SELECT count(*) FROM orders") == 0 || count(t, s2, "SELECT count(*) FROM orders") == 0 {
		t.Fatal("a target got no rows")
	}
	stream := runStreamInBackground(t, a, plan, workflows.ImportSourceShard, 0)
	mustExec(t, ext, `INSERT INTO orders (customer_id, note) SELECT i, 'streamed' FROM generate_series(1, 50) i`)
	mustExec(t, ext, `DELETE FROM orders WHERE note = 'order 7'`)
	want := count(t, ext, "SELECT count(*) FROM orders")
	deadline := time.Now().Add(time.Minute)
	for total("SELECT count(*) FROM orders") != want {
		if time.Now().After(deadline) {
			t.Fatalf("the stream did not catch up: %d orders imported, %d on the external Postgres", total("SELECT count(*) FROM orders"), want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	stream.stop(t)
	if diff, err := a.DiffTables(ctx, plan); err != nil || diff.Differences != 0 || !diff.Done {
		t.Fatalf("VDiff %+v, %v", diff, err)
	}

	cut := workflows.CutoverInput{Plan: plan, BufferID: "movetables-shop-data", BufferFor: 10 * time.Second,
		MaxLagBytes: 1 << 20, MaxCatchUp: 5 * time.Second, RouterWait: 300 * time.Millisecond}
	stream = runStreamInBackground(t, a, plan, workflows.ImportSourceShard, 0)
	mustExec(t, ext, `INSERT INTO orders (customer_id, note) VALUES (5, 'just before the fence')`)
	if _, err := a.CheckCutover(ctx, cut); err != nil {
		t.Fatal(err)
	}
	if _, err := a.FenceSources(ctx, cut); err != nil {
		t.Fatal(err)
	}
	if _, err := ext.Exec(ctx, `INSERT INTO orders (customer_id, note) VALUES (5, 'fenced')`); pgCode(err) != pgerr.ReadOnlySQLTransaction {
		t.Fatalf("a write to the fenced external table: %v", err)
	}
	stream.reachesMarker(t)
	if got, want := total("SELECT count(*) FROM orders"), count(t, ext, "SELECT count(*) FROM orders"); got != want {
		t.Fatalf("%d orders imported after the fence, %d on the external Postgres", got, want)
	}
	if _, err := a.SetSequences(ctx, cut); err != nil {
		t.Fatal(err)
	}
	if next, high := count(t, s1, "SELECT nextval('orders_id_seq')"), count(t, ext, "SELECT max(id) FROM orders"); next <= high {
		t.Fatalf("s1's next order id %d is not past the external %d", next, high)
	}
	if _, err := a.PrepareReverse(ctx, cut); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SwitchTopology(ctx, cut); err != nil {
		t.Fatal(err)
	}
	snap, err := st.GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, listed := listedTable(snap.Topology, "shop", plan.Tables[0]); !listed || snap.Topology.Resolve("shop", "public", "orders").Group.UID != "data" {
		t.Fatal("orders has no entry of its own in group data after the switch")
	}
	if _, ok := snap.Topology.Group(workflows.ImportSourceShard); ok {
		t.Fatal("the import's source group reached the stored topology")
	}

	// Until Complete, writes on the targets reach the external Postgres.
	rev := plan.Reversed()
	back := []*backgroundStream{runStreamInBackground(t, a, rev, "s1", 0), runStreamInBackground(t, a, rev, "s2", 0)}
	mustExec(t, s1, `INSERT INTO orders (customer_id, id, note) VALUES (1, 900001, 'written through tessera')`)
	mustExec(t, s2, `INSERT INTO orders (customer_id, id, note) VALUES (2, 900002, 'written through tessera')`)
	deadline = time.Now().Add(time.Minute)
	for count(t, ext, "SELECT count(*) FROM orders WHERE note = 'written through tessera'") != 2 {
		if time.Now().After(deadline) {
			t.Fatal("the reverse streams did not reach the external Postgres")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, s := range back {
		s.stop(t)
	}

	if err := a.CompleteReshard(ctx, plan); err != nil {
		t.Fatal(err)
	}
	if n := count(t, ext, "SELECT count(*) FROM orders"); n == 0 {
		t.Fatal("the external table was emptied")
	}
	mustExec(t, ext, `INSERT INTO orders (customer_id, note) VALUES (5, 'the fence is gone')`)
	for name, c := range map[string]*pgx.Conn{"external": ext, "s1": s1, "s2": s2} {
		for what, sql := range map[string]string{
			"slots":        "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1 || '%'",
			"publications": "SELECT count(*) FROM pg_publication WHERE pubname LIKE $1 || '%'",
			"origins":      "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'tessera_' || $1 || '%'",
			"triggers":     "SELECT count(*) FROM pg_trigger WHERE tgname LIKE $1 || '%'",
			"functions":    "SELECT count(*) FROM pg_proc WHERE proname LIKE $1 || '%'",
		} {
			if n := count(t, c, sql, plan.Key); n != 0 {
				t.Errorf("%d %s of the import left on %s", n, what, name)
			}
		}
	}
}

// TestImportRefusesWalLevelReplica: a plain Postgres without logical
// decoding is refused at the plan, saying which setting to change.
func TestImportRefusesWalLevelReplica(t *testing.T) {
	ctx := testCtx(t)
	// Not t.TempDir(): its parent is closed to the postgres OS user.
	dir, err := os.MkdirTemp("", "import-wal-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	plain, err := pgmanager.New(pgmanager.Config{InstanceID: "import-wal-replica", Dir: filepath.Join(dir, "pg"), Port: port,
		Settings: map[string]string{"wal_level": "replica", "max_connections": "20", "fsync": "off"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { plain.Close(context.Background()) })
	if err := plain.InitPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	if err := plain.Start(ctx); err != nil {
		t.Fatal(err)
	}
	mustExec(t, connect(t, plain.ConnConfig("postgres", "")), `CREATE TABLE public.orders (id int8 PRIMARY KEY, customer_id int8 NOT NULL)`)

	st, err := store.Dial(ctx, etcdembed.Start(t), "import-wal")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.ApplyTopology(ctx, parseMoveTopology(t), store.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	if _, err := st.UpdateShardState(ctx, "a1", func(ss *store.ShardState) error { ss.Primary = "a1-0"; return nil }); err != nil {
		t.Fatal(err)
	}
	a := &Actions{Store: st, Conn: createShards(t, "impwal", `CREATE TABLE public.orders (id int8 PRIMARY KEY, customer_id int8 NOT NULL)`, "a1")}
	in := moveInput([]string{"orders"}, "archive")
	in.Input.Source = &workflows.ExternalSource{ConnSecret: writeSecret(t, plain.ConnConfig("postgres", ""))}
	_, err = a.PlanMoveTables(ctx, in)
	if sqlState(err) != pgerr.ObjectNotInPrerequisiteState || !strings.Contains(err.Error(), "wal_level = replica") {
		t.Fatalf("plan of an import from wal_level=replica: %v", err)
	}
	// A missing secret names the file, and nothing else.
	in.Input.Source.ConnSecret = filepath.Join(t.TempDir(), "absent.dsn")
	if _, err := a.PlanMoveTables(ctx, in); err == nil || !strings.Contains(err.Error(), "absent.dsn") {
		t.Fatalf("plan with a missing secret: %v", err)
	}
}
