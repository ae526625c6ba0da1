package actions

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
	"github.com/tesseradb/tessera/workflows"
)

const cutoverDDL = `CREATE TABLE public.customers (customer_id int8 PRIMARY KEY, name text);
	CREATE TABLE public.orders (id bigserial, customer_id int8 NOT NULL REFERENCES customers, note text, PRIMARY KEY (customer_id, id))`

// backgroundStream is a StreamChanges running in a goroutine.
type backgroundStream struct {
	cancel context.CancelFunc
	done   chan error
}

func runStreamInBackground(t *testing.T, a *Actions, plan workflows.ReshardPlan, source string, fenceGeneration int) *backgroundStream {
	ctx, cancel := context.WithCancel(testCtx(t))
	s := &backgroundStream{cancel: cancel, done: make(chan error, 1)}
	in := workflows.SourceInput{Plan: plan, Source: source, FenceGeneration: fenceGeneration}
	go func() { s.done <- a.StreamChanges(ctx, in) }()
	t.Cleanup(cancel)
	return s
}

// stop cancels the stream and checks that it ends so.
func (s *backgroundStream) stop(t *testing.T) {
	s.cancel()
	if err := <-s.done; !errors.Is(err, context.Canceled) {
		t.Errorf("stream ended with %v", err)
	}
}

// reachesMarker checks that the stream ends by itself (it applied the
// fence's marker) in time.
func (s *backgroundStream) reachesMarker(t *testing.T) {
	t.Helper()
	select {
	case err := <-s.done:
		if err != nil {
			t.Fatalf("the stream stopped at the fence with %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the stream did not stop at the fence's marker")
	}
}

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// TestCutoverActivitiesSwitchAndComplete runs SwitchTraffic's activities
// in the workflow's order on real Postgres and etcd, splitting s1 over t1
// and t2: a transaction held open on the source makes the first fence
// attempt time out (retryable, nothing changed), the retry after it
// commits fences, its rows reach the targets, fenced writes fail with
// 25006, the topology switches by compare-and-swap, the reverse stream
// carries the targets' writes back (and the forward stream skips them),
// and Complete leaves no slot, publication, origin or trigger anywhere.
func TestCutoverActivitiesSwitchAndComplete(t *testing.T) {
	ctx := testCtx(t)
	st, err := store.Dial(ctx, etcdembed.Start(t), "cutover")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	top := parseTopology(t)
	if _, err := st.ApplyTopology(ctx, top, store.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	a := &Actions{Store: st, Conn: createShards(t, "cut", cutoverDDL, "s1", "t1", "t2")}
	src, t1, t2 := shardConn(t, "cut", "s1"), shardConn(t, "cut", "t1"), shardConn(t, "cut", "t2")
	mustExec(t, src, `INSERT INTO customers SELECT i, 'customer ' || i FROM generate_series(1, 300) i`)
	mustExec(t, src, `INSERT INTO orders (customer_id, note) SELECT i % 300 + 1, 'order ' || i FROM generate_series(1, 1000) i`)

	plan, err := planTopology(top, workflows.PlanReshardInput{WorkflowID: "reshard-shop-data",
		Input: workflows.ReshardInput{Database: "shop", ShardGroup: "data", TargetKeyRanges: splitRanges}})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.planTables(ctx, &plan, top); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CopyTables(ctx, workflows.SourceInput{Plan: plan, Source: "s1"}); err != nil {
		t.Fatal(err)
	}
	in := workflows.CutoverInput{Plan: plan, BufferID: "reshard-shop-data", BufferFor: 10 * time.Second,
		MaxLagBytes: 1 << 20, MaxCatchUp: 5 * time.Second, RouterWait: 300 * time.Millisecond}

	// Preconditions, with the stream running as the workflow has it.
	stream := runStreamInBackground(t, a, plan, "s1", 0)
	mustExec(t, src, `INSERT INTO orders (customer_id, note) VALUES (5, 'streamed')`)
	check, err := a.CheckCutover(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("preconditions: %+v", check)

	if _, err := a.SetTableBuffer(ctx, in); err != nil {
		t.Fatal(err)
	}
	if bufs, err := st.ListTableBuffers(ctx); err != nil || len(bufs) != 1 || len(bufs[0].Tables) != 2 {
		t.Fatalf("table buffers %+v, %v", bufs, err)
	}

	// A transaction holding row locks on the source delays the fence.
	held, err := connect(t, testPostgres(t).ConnConfig(shardDB("cut", "s1"), "")).Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := held.Exec(ctx, `UPDATE customers SET name = 'held' WHERE customer_id = 7`); err != nil {
		t.Fatal(err)
	}
	if _, err := held.Exec(ctx, `INSERT INTO customers VALUES (100001, 'held open')`); err != nil {
		t.Fatal(err)
	}
	_, err = a.FenceSources(ctx, in)
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != lockNotAvailable || appErr.NonRetryable() {
		t.Fatalf("fence under a held transaction: %v", err)
	}
	if n := count(t, src, "SELECT count(*) FROM pg_trigger WHERE tgname = $1", plan.FenceTrigger()); n != 0 {
		t.Fatalf("a timed-out fence left %d triggers", n)
	}
	if err := held.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	// The fence stops the running stream at its marker. A fence undone
	// (a later step failed) gives the source its writes back and the
	// stream starts again, for the next generation's marker: it passes
	// a marker of the undone generation (a retried fence writes one per
	// attempt), and the next fence covers the writes after the undo.
	fenced, err := a.FenceSources(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	stream.reachesMarker(t)
	if err := a.UnfenceSources(ctx, in); err != nil {
		t.Fatal(err)
	}
	in.FenceGeneration++
	stream = runStreamInBackground(t, a, plan, "s1", in.FenceGeneration)
	mustExec(t, src, `INSERT INTO customers VALUES (100002, 'after the undo')`)
	mustExec(t, src, `SELECT pg_logical_emit_message(true, $1, $2)`, pgerr.CutoverFencePrefix, plan.Key+"/0")
	mustExec(t, src, `INSERT INTO customers VALUES (100004, 'after a stale marker')`)
	fenced, err = a.FenceSources(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	in.Markers = fenced.Markers
	t.Logf("fenced: %+v", fenced)

	// The fence: writes fail with 25006 and the router's prefix; reads go on.
	for _, sql := range []string{`INSERT INTO customers VALUES (100003, 'too late')`, `UPDATE orders SET note = 'x' WHERE id = 1`,
		`DELETE FROM orders WHERE id = 2`, `TRUNCATE orders`} {
		_, err := src.Exec(ctx, sql)
		if pgCode(err) != pgerr.ReadOnlySQLTransaction || !strings.HasPrefix(err.(*pgconn.PgError).Message, pgerr.CutoverFencePrefix) {
			t.Fatalf("%s on the fenced source: %v", sql, err)
		}
	}
	wantCustomers := count(t, src, "SELECT count(*) FROM customers")
	wantOrders := count(t, src, "SELECT count(*) FROM orders")

	stream.reachesMarker(t)
	total := func(sql string) int64 { return count(t, t1, sql) + count(t, t2, sql) }
	if got := total("SELECT count(*) FROM customers"); got != wantCustomers {
		t.Fatalf("%d customers on the targets, %d on the source", got, wantCustomers)
	}
	if got := total("SELECT count(*) FROM orders"); got != wantOrders {
		t.Fatalf("%d orders on the targets, %d on the source", got, wantOrders)
	}
	// Retried after it stopped at the marker (its Replicator died before
	// the workflow heard), the stream meets the marker again and stops:
	// the slot was not confirmed past the marker's transaction.
	runStreamInBackground(t, a, plan, "s1", in.FenceGeneration).reachesMarker(t)
	if total("SELECT count(*) FROM customers WHERE customer_id IN (100001, 100002, 100004) OR (customer_id = 7 AND name = 'held')") != 4 {
		t.Fatal("the held transaction's or the undone fence's writes are not on the targets")
	}

	seqs, err := a.SetSequences(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	maxID := count(t, src, "SELECT max(id) FROM orders")
	if len(seqs) != 1 || seqs["orders_id_seq"] < maxID {
		t.Fatalf("sequences %v, max order id %d", seqs, maxID)
	}
	for _, c := range []*pgx.Conn{t1, t2} {
		if next := count(t, c, "SELECT nextval('orders_id_seq')"); next <= maxID {
			t.Fatalf("a target's next order id %d is not past %d", next, maxID)
		}
	}

	if _, err := a.PrepareReverse(ctx, in); err != nil {
		t.Fatal(err)
	}
	rev := plan.Reversed()
	for _, s := range []string{"t1", "t2"} {
		if n := count(t, shardConn(t, "cut", s), "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", rev.Slot(s)); n != 1 {
			t.Fatalf("no reverse slot on %s", s)
		}
	}

	// The point of no return, and its retry.
	sw, err := a.SwitchTopology(ctx, in)
	if err != nil {
		t.Fatal(err)
	}
	again, err := a.SwitchTopology(ctx, in)
	if err != nil || again.Revision != sw.Revision {
		t.Fatalf("retried switch: %+v, %v (first %+v)", again, err, sw)
	}
	snap, err := st.GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := snap.Topology.Group("data"); snap.Revision != sw.Revision || len(g.KeyRanges) != 2 || g.KeyRanges[1].ShardUID != "t2" {
		t.Fatalf("stored topology revision %d, group %+v", snap.Revision, g)
	}
	// A plan whose sources no longer hold the group is refused.
	stale := in
	stale.Plan.TargetTopology = plan.SourceTopology
	stale.Plan.SourceTopology = []byte(strings.Replace(string(plan.SourceTopology), `"s1"`, `"s9"`, 1))
	if _, err := a.SwitchTopology(ctx, stale); sqlState(err) != pgerr.ObjectNotInPrerequisiteState {
		t.Fatalf("switch of a changed group: %v", err)
	}

	// Routers: one behind is waited for, up to the bound.
	reg, err := st.Register(ctx, store.Record{Kind: store.KindRouter, ID: "r1", Addr: "127.0.0.1:1", TopologyRevision: sw.Revision - 1}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	in.Revision = sw.Revision
	waited, err := a.WaitRouters(ctx, in)
	if err != nil || len(waited.Waiting) != 1 || waited.Routers != 1 {
		t.Fatalf("wait for a stale router: %+v, %v", waited, err)
	}
	reg.Close(ctx)
	waited, err = a.WaitRouters(ctx, in)
	if err != nil || len(waited.Waiting) != 0 {
		t.Fatalf("wait with no router: %+v, %v", waited, err)
	}
	if _, err := a.ClearTableBuffer(ctx, in); err != nil {
		t.Fatal(err)
	}
	if bufs, err := st.ListTableBuffers(ctx); err != nil || len(bufs) != 0 {
		t.Fatalf("table buffers after the clear: %+v, %v", bufs, err)
	}

	// Writes on the targets flow back to the fenced source.
	reverse := []*backgroundStream{runStreamInBackground(t, a, rev, "t1", 0), runStreamInBackground(t, a, rev, "t2", 0)}
	newTop, err := topo.Parse(plan.TargetTopology)
	if err != nil {
		t.Fatal(err)
	}
	placement := newTop.Resolve("shop", "public", "customers")
	for id := int64(200001); id <= 200020; id++ {
		_, shard, err := placement.RouteInt(id)
		if err != nil {
			t.Fatal(err)
		}
		mustExec(t, shardConn(t, "cut", shard), `INSERT INTO customers VALUES ($1, 'written on the target')`, id)
	}
	mustExec(t, t1, `UPDATE customers SET name = 'updated on t1'`)
	deadline := time.Now().Add(time.Minute)
	for count(t, src, "SELECT count(*) FROM customers WHERE customer_id > 200000") != 20 ||
		count(t, src, "SELECT count(*) FROM customers WHERE name = 'updated on t1'") != count(t, t1, "SELECT count(*) FROM customers") {
		if time.Now().After(deadline) {
			t.Fatal("the reverse streams did not bring the targets' writes back")
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, s := range reverse {
		s.stop(t)
	}
	// The forward stream skips what the reverse streams applied: running
	// it over those transactions applies nothing on the targets.
	origin := func() string {
		var lsns string
		if err := t1.QueryRow(ctx, `SELECT coalesce(pg_replication_origin_progress($1, false)::text, 'none') || ' ' ||
			coalesce(pg_replication_origin_progress($2, false)::text, 'none')`,
			"tessera_"+plan.Key+"_s1_t1", "tessera_"+plan.Key+"_s1_t2").Scan(&lsns); err != nil {
			t.Fatalf("forward origins: %v", err)
		}
		return lsns
	}
	before := origin()
	var now string
	if err := src.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&now); err != nil {
		t.Fatal(err)
	}
	stopAt, err := pglogrepl.ParseLSN(now)
	if err != nil {
		t.Fatal(err)
	}
	if err := a.runStream(ctx, plan, "s1", stopAt); err != nil {
		t.Fatal(err)
	}
	if after := origin(); after != before {
		t.Fatalf("the forward stream applied the reverse stream's changes: origin %s -> %s", before, after)
	}

	if err := a.CompleteReshard(ctx, plan); err != nil {
		t.Fatal(err)
	}
	if n := count(t, src, "SELECT count(*) FROM customers") + count(t, src, "SELECT count(*) FROM orders"); n != 0 {
		t.Fatalf("%d moved rows left on the source", n)
	}
	mustExec(t, src, `INSERT INTO customers VALUES (1, 'the fence is gone')`)
	for _, s := range []string{"s1", "t1", "t2"} {
		c := shardConn(t, "cut", s)
		for what, sql := range map[string]string{
			"slots":        "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1 || '%'",
			"publications": "SELECT count(*) FROM pg_publication WHERE pubname LIKE $1 || '%'",
			"origins":      "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'tessera_' || $1 || '%'",
			"triggers":     "SELECT count(*) FROM pg_trigger WHERE tgname LIKE $1 || '%'",
			"functions":    "SELECT count(*) FROM pg_proc WHERE proname LIKE $1 || '%'",
		} {
			if n := count(t, c, sql, plan.Key); n != 0 {
				t.Errorf("%d %s of the reshard left on %s", n, what, s)
			}
		}
	}
	if got := total("SELECT count(*) FROM customers"); got != wantCustomers+20 {
		t.Fatalf("%d customers on the targets after Complete, want %d", got, wantCustomers+20)
	}
}
