package actions

import (
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
	"github.com/tesseradb/tessera/workflows"
)

// moveTopology has shop's customers and orders in group "data", split
// over s1 and s2 by customer id, a single-shard group "archive" on a1,
// and a reference table.
const moveTopology = `{
  "authoritative_shard_group": "main",
  "shard_indexes": {"customer_xx": {"type": "xxhash", "columns": ["customer_id"]}},
  "shard_groups": [
    {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
    {"uid": "data", "default_shard_index": "customer_xx", "key_ranges": [{"shard_uid": "s1", "end": "80"}, {"shard_uid": "s2", "start": "80"}]},
    {"uid": "archive", "key_ranges": [{"shard_uid": "a1"}]},
    {"uid": "overlap", "key_ranges": [{"shard_uid": "s2"}]}
  ],
  "databases": {"shop": {"default_shard_group": "data", "schemas": {"public": {
    "tables": {"notes": {"shard_group": "main"}},
    "reference_tables": {"countries": {"shard_groups": ["data"]}}}}}}
}`

const moveSourceDDL = `CREATE TABLE public.customers (customer_id int8 PRIMARY KEY, name text);
	CREATE TABLE public.orders (id bigserial, customer_id int8 NOT NULL, note text, PRIMARY KEY (customer_id, id))`

func parseMoveTopology(t *testing.T) *topo.Topology {
	top, err := topo.Parse([]byte(moveTopology))
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func moveInput(tables []string, target string) workflows.PlanMoveTablesInput {
	return workflows.PlanMoveTablesInput{WorkflowID: "movetables-shop-" + target,
		Input: workflows.MoveTablesInput{Database: "shop", Tables: tables, TargetShardGroup: target}}
}

func TestPlanMoveTablesRefusesBadInputWithItsSQLState(t *testing.T) {
	top := parseMoveTopology(t)
	for _, c := range []struct {
		name  string
		in    workflows.PlanMoveTablesInput
		state string
	}{
		{"no tables", moveInput(nil, "archive"), pgerr.InvalidParameterValue},
		{"unknown group", moveInput([]string{"public.orders"}, "nope"), pgerr.UndefinedObject},
		{"already there", moveInput([]string{"public.orders"}, "data"), pgerr.ObjectNotInPrerequisiteState},
		{"reference table", moveInput([]string{"countries"}, "archive"), pgerr.FeatureNotSupported},
		{"two groups", moveInput([]string{"public.orders", "public.notes"}, "archive"), pgerr.FeatureNotSupported},
		{"named twice", moveInput([]string{"orders", "public.orders"}, "archive"), pgerr.InvalidParameterValue},
		{"shared shard", moveInput([]string{"public.orders"}, "overlap"), pgerr.FeatureNotSupported},
		{"unknown index", func() workflows.PlanMoveTablesInput {
			in := moveInput([]string{"public.orders"}, "archive")
			in.Input.ShardIndex = "nope"
			return in
		}(), pgerr.InvalidParameterValue},
	} {
		_, err := planMove(top, c.in)
		if got := sqlState(err); got != c.state {
			t.Errorf("%s: %v (SQLSTATE %q), want SQLSTATE %s", c.name, err, got, c.state)
		}
	}
	// An import's secret is a file path; the topology may not use the
	// import's source name.
	imp := moveInput([]string{"public.orders"}, "archive")
	imp.Input.Source = &workflows.ExternalSource{ConnSecret: "import.dsn"}
	if _, err := planMove(top, imp); sqlState(err) != pgerr.InvalidParameterValue {
		t.Errorf("import with a relative secret path: %v", err)
	}
}

// TestMoveTablesActivities moves orders from group data (s1, s2) to the
// single-shard group archive (a1) with the activities in the workflow's
// order, on real Postgres and etcd: the plan's checks, copy, stream under
// writes, VDiff, fence, sequences, the placement switch (and its retry),
// reverse streams from a1 routed back by customer id, and Complete, which
// drops orders from s1 and s2, keeps customers and leaves no slot,
// publication, origin or trigger anywhere.
func TestMoveTablesActivities(t *testing.T) {
	ctx := testCtx(t)
	st, err := store.Dial(ctx, etcdembed.Start(t), "movetables")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	top := parseMoveTopology(t)
	if _, err := st.ApplyTopology(ctx, top, store.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	conns := createShards(t, "move", moveSourceDDL, "s1", "s2")
	createShards(t, "move", `CREATE TABLE public.orders (id bigserial, customer_id int8 NOT NULL, note text, PRIMARY KEY (customer_id, id))`, "a1")
	a := &Actions{Store: st, Conn: conns}
	s1, s2, a1 := shardConn(t, "move", "s1"), shardConn(t, "move", "s2"), shardConn(t, "move", "a1")
	data := top.Resolve("shop", "public", "orders")
	shardOf := func(customer int64) *pgx.Conn {
		_, shard, err := data.RouteInt(customer)
		if err != nil {
			t.Fatal(err)
		}
		return map[string]*pgx.Conn{"s1": s1, "s2": s2}[shard]
	}
	for c := int64(1); c <= 40; c++ {
		mustExec(t, shardOf(c), `INSERT INTO customers VALUES ($1, 'c')`, c)
		mustExec(t, shardOf(c), `INSERT INTO orders (customer_id, note) SELECT $1, 'order ' || i FROM generate_series(1, 25) i`, c)
	}

	in := moveInput([]string{"orders"}, "archive")
	if _, err := a.PlanMoveTables(ctx, in); sqlState(err) != pgerr.UndefinedObject {
		t.Fatalf("plan with a1 without a primary: %v", err)
	}
	if _, err := st.UpdateShardState(ctx, "a1", func(s *store.ShardState) error { s.Primary = "a1-0"; return nil }); err != nil {
		t.Fatal(err)
	}
	mustExec(t, a1, `INSERT INTO orders (customer_id, note) VALUES (1, 'in the way')`)
	if _, err := a.PlanMoveTables(ctx, in); sqlState(err) != pgerr.ObjectNotInPrerequisiteState || !strings.Contains(err.Error(), "already holds rows") {
		t.Fatalf("plan with rows on the target: %v", err)
	}
	mustExec(t, a1, `TRUNCATE orders`)
	plan, err := a.PlanMoveTables(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	if plan.ShardGroup != "data" || plan.TargetShardGroup != "archive" || len(plan.Sources) != 2 || len(plan.Targets) != 1 ||
		len(plan.Tables) != 1 || plan.Tables[0].ShardColumn != "customer_id" || plan.Tables[0].ReverseShardColumn != "customer_id" {
		t.Fatalf("plan %+v", plan)
	}

	for _, src := range plan.Sources {
		if _, err := a.CopyTables(ctx, workflows.SourceInput{Plan: plan, Source: src}); err != nil {
			t.Fatal(err)
		}
	}
	if n := count(t, a1, "SELECT count(*) FROM orders"); n != 1000 {
		t.Fatalf("%d orders copied to a1", n)
	}
	streams := map[string]*backgroundStream{}
	for _, src := range plan.Sources {
		streams[src] = runStreamInBackground(t, a, plan, src, 0)
	}
	for c := int64(1); c <= 40; c += 3 {
		mustExec(t, shardOf(c), `INSERT INTO orders (customer_id, note) VALUES ($1, 'streamed')`, c)
		mustExec(t, shardOf(c), `DELETE FROM orders WHERE customer_id = $1 AND note = 'order 7'`, c)
	}
	total := func(sql string) int64 { return count(t, s1, sql) + count(t, s2, sql) }
	want := total("SELECT count(*) FROM orders")
	deadline := time.Now().Add(time.Minute)
	for count(t, a1, "SELECT count(*) FROM orders") != want {
		if time.Now().After(deadline) {
			t.Fatalf("the streams did not catch up: %d orders on a1, want %d", count(t, a1, "SELECT count(*) FROM orders"), want)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, s := range streams {
		s.stop(t)
	}
	diff, err := a.DiffTables(ctx, plan)
	if err != nil || !diff.Done || diff.Differences != 0 {
		t.Fatalf("VDiff %+v, %v", diff, err)
	}

	// The cutover's steps, as SwitchTraffic runs them.
	cut := workflows.CutoverInput{Plan: plan, BufferID: "movetables-shop-archive", BufferFor: 10 * time.Second,
		MaxLagBytes: 1 << 20, MaxCatchUp: 5 * time.Second, RouterWait: 300 * time.Millisecond}
	for _, src := range plan.Sources {
		streams[src] = runStreamInBackground(t, a, plan, src, 0)
	}
	mustExec(t, s1, `INSERT INTO orders (customer_id, note) SELECT customer_id, 'before the fence' FROM customers`)
	if _, err := a.CheckCutover(ctx, cut); err != nil {
		t.Fatal(err)
	}
	if _, err := a.FenceSources(ctx, cut); err != nil {
		t.Fatal(err)
	}
	if _, err := s2.Exec(ctx, `INSERT INTO orders (customer_id, note) VALUES (2, 'fenced')`); pgCode(err) != pgerr.ReadOnlySQLTransaction {
		t.Fatalf("write to a fenced source: %v", err)
	}
	mustExec(t, s2, `INSERT INTO customers VALUES (1000, 'customers stay writable')`)
	for _, s := range streams {
		s.reachesMarker(t)
	}
	if got, want := count(t, a1, "SELECT count(*) FROM orders"), total("SELECT count(*) FROM orders"); got != want {
		t.Fatalf("%d orders on a1 after the fence, %d on the sources", got, want)
	}
	if _, err := a.SetSequences(ctx, cut); err != nil {
		t.Fatal(err)
	}
	// Each source has its own sequence: a1's goes past both.
	high := max(count(t, s1, "SELECT max(id) FROM orders"), count(t, s2, "SELECT max(id) FROM orders"))
	if next := count(t, a1, "SELECT nextval('orders_id_seq')"); next <= high {
		t.Fatalf("a1's next order id %d is not past %d", next, high)
	}
	if _, err := a.PrepareReverse(ctx, cut); err != nil {
		t.Fatal(err)
	}
	sw, err := a.SwitchTopology(ctx, cut)
	if err != nil {
		t.Fatal(err)
	}
	if again, err := a.SwitchTopology(ctx, cut); err != nil || again.Revision != sw.Revision {
		t.Fatalf("retried switch %+v, %v (first %+v)", again, err, sw)
	}
	snap, err := st.GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g := snap.Topology.Resolve("shop", "public", "orders").Group.UID; g != "archive" {
		t.Fatalf("orders are in group %s after the switch", g)
	}
	if g := snap.Topology.Resolve("shop", "public", "customers").Group.UID; g != "data" {
		t.Fatalf("customers moved too, to %s", g)
	}

	// Writes on a1 flow back to s1 and s2, each row to its customer's shard.
	rev := plan.Reversed()
	back := runStreamInBackground(t, a, rev, "a1", 0)
	mustExec(t, a1, `INSERT INTO orders (customer_id, note) SELECT c, 'written on a1' FROM generate_series(1, 40) c`)
	deadline = time.Now().Add(time.Minute)
	for total("SELECT count(*) FROM orders WHERE note = 'written on a1'") != 40 {
		if time.Now().After(deadline) {
			t.Fatal("the reverse stream did not bring a1's writes back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for c := int64(1); c <= 40; c++ {
		if n := count(t, shardOf(c), "SELECT count(*) FROM orders WHERE customer_id = $1 AND note = 'written on a1'", c); n != 1 {
			t.Fatalf("customer %d's order from a1 is not on its shard", c)
		}
	}
	back.stop(t)

	// ReverseTraffic's switch puts the placement back, and SwitchTraffic's again.
	if _, err := a.SwitchTopology(ctx, workflows.CutoverInput{Plan: rev}); err != nil {
		t.Fatal(err)
	}
	if snap, err = st.GetTopology(ctx); err != nil || snap.Topology.Resolve("shop", "public", "orders").Group.UID != "data" {
		t.Fatalf("after the reverse switch: %v", err)
	}
	if len(topo.Diff(top, snap.Topology)) != 0 {
		t.Fatalf("the reverse switch did not restore the topology: %v", topo.Diff(top, snap.Topology))
	}
	if _, err := a.SwitchTopology(ctx, cut); err != nil {
		t.Fatal(err)
	}

	if err := a.CompleteReshard(ctx, plan); err != nil {
		t.Fatal(err)
	}
	for name, c := range map[string]*pgx.Conn{"s1": s1, "s2": s2} {
		if n := count(t, c, "SELECT count(*) FROM pg_class WHERE relname = 'orders'"); n != 0 {
			t.Errorf("orders is still on %s", name)
		}
		if n := count(t, c, "SELECT count(*) FROM customers"); n == 0 {
			t.Errorf("customers were emptied on %s", name)
		}
	}
	for name, c := range map[string]*pgx.Conn{"s1": s1, "s2": s2, "a1": a1} {
		for what, sql := range map[string]string{
			"slots":        "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1 || '%'",
			"publications": "SELECT count(*) FROM pg_publication WHERE pubname LIKE $1 || '%'",
			"origins":      "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'tessera_' || $1 || '%'",
			"triggers":     "SELECT count(*) FROM pg_trigger WHERE tgname LIKE $1 || '%'",
			"functions":    "SELECT count(*) FROM pg_proc WHERE proname LIKE $1 || '%'",
		} {
			if n := count(t, c, sql, plan.Key); n != 0 {
				t.Errorf("%d %s of the move left on %s", n, what, name)
			}
		}
	}
	mustExec(t, a1, `INSERT INTO orders (customer_id, note) VALUES (1, 'a1 takes writes')`)
}
