package e2e

import (
	"context"
	"errors"
	"log/slog"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
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
// VDiff, SwitchTraffic of replica reads (refused until the targets have a
// replica), SwitchTraffic while a writer writes directly on the source (every
// acknowledged write ends up on the target shard its key routes to, the
// fenced source refuses writes with 25006), ReverseTraffic and
// SwitchTraffic again (writes made on either side meanwhile are carried
// over), Complete leaving no slot, publication, origin or trigger behind.
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
	workflows.Register(w, storeActivities(st))
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
	// A writer inserts, updates and deletes directly on the source's
	// primary (no router in front: the fence's 25006 ends it) and logs
	// every write the source acknowledged.
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
	if prog.Copied["public.customers"] < 5000 || prog.LastDiff == nil || !prog.LastDiff.Done || prog.LastDiff.Differences != 0 ||
		prog.RowsEstimated["public.customers"] <= 0 {
		t.Fatalf("progress %+v", prog)
	}

	// A VDiff on demand (the VDiff workflow), the writer still writing:
	// the streams stop at a known point, and start again after.
	diffStart := time.Now()
	rep := runVDiff(t, ctx, queue, run.GetID())
	t.Logf("VDiff workflow at ready_for_cutover took %s: %+v", time.Since(diffStart), rep)
	if rep.Phase != workflows.PhaseDone || rep.MovementPhase != workflows.PhaseReadyForCutover || rep.Reverse ||
		rep.Result == nil || !rep.Result.Done || rep.Result.Differences != 0 || len(rep.Result.Reports) != 1 {
		t.Fatalf("VDiff at ready_for_cutover: %+v", rep)
	}

	// The cutover, with the writer still writing.
	// Replica reads first: refused while the targets have no replica,
	// switched once each has one. Discovery records are all the activity
	// reads of replicas (TestReshardSwitchReadsThenWrites routes real
	// reads to a real one); the writer goes on.
	switchReadsFirst(t, ctx, st, run.GetID())
	switchStart := time.Now()
	cutoverUpdate(t, ctx, run.GetID(), workflows.SwitchTrafficUpdate)
	t.Logf("SwitchTraffic returned after %s", time.Since(switchStart))
	if snap, err := st.GetTopology(ctx); err != nil || snap.Topology.HasReplicaReads() {
		t.Fatalf("the writes' switch left replica key ranges: %v", err)
	}
	if p := reshardProgress(t, ctx, run.GetID()); p.ReadsSwitched != nil {
		t.Fatalf("progress after the writes' switch: %+v", p)
	}
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
	// Switched, a VDiff compares the other way: the targets, which now
	// serve, against the sources the reverse streams keep current. The
	// operator's way: `tessera vdiff --run`, its progress in plain lines
	// (stderr is no terminal), then `tessera workflow show`.
	out, errOut, code := runCLI(ctx, "vdiff", "--database", "shop", "--shard-group", "data", "--run", "--task-queue", queue)
	t.Logf("tessera vdiff --run:\n%s%s", errOut, out)
	if code != 0 || !strings.Contains(errOut, "started workflow vdiff-reshard-shop-data") ||
		!strings.Contains(out, "VDiff of reshard-shop-data (reverse") || !strings.Contains(out, "last VDiff 0 differences") {
		t.Fatalf("tessera vdiff --run when switched: exit %d", code)
	}
	out, _, code = runCLI(ctx, "workflow", "show", workflows.VDiffID(run.GetID()))
	if code != 0 || !strings.Contains(out, "VDiff") || !strings.Contains(out, "phase done | movement reshard-shop-data | tables 1 done of 1 started") {
		t.Fatalf("workflow show of the VDiff: exit %d\n%s", code, out)
	}
	t.Logf("cutover: %d acknowledged writes; write pause (fence to topology switch) %s; table buffer held %s; topology revision %d",
		writer.acked(), prog.Cutover.WritePause(), prog.Cutover.BufferHeld(), prog.Cutover.Revision)

	// The topology routes the group to the targets.
	snap, err := st.GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if g, _ := snap.Topology.Group("data"); snap.Revision != prog.Cutover.Revision || len(g.KeyRanges) != 2 || g.KeyRanges[0].ShardUID != "t1" {
		t.Fatalf("topology revision %d, group data %+v", snap.Revision, g)
	}
	// Every acknowledged write is on the target shard its key routes to,
	// and nowhere else.
	placement := snap.Topology.Resolve("shop", "public", "customers")
	onTarget := map[string]map[int64]string{"t1": {}, "t2": {}}
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
	if _, err := src.Exec(ctx, `INSERT INTO customers VALUES (999999, 'late')`); pgCode(err) != pgerr.ReadOnlySQLTransaction {
		t.Fatalf("a direct write to the fenced source: %v", err)
	}

	// ReverseTraffic moves the group back to the source: a write made on
	// a target while it served is carried back, the targets refuse
	// writes, the source takes them again.
	_, onT, err := placement.RouteInt(777777)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conns[onT].Exec(ctx, `INSERT INTO customers VALUES (777777, 'written on a target')`); err != nil {
		t.Fatal(err)
	}
	waitForRow(t, ctx, src, 777777)
	cutoverUpdate(t, ctx, run.GetID(), workflows.ReverseTrafficUpdate)
	prog = reshardProgress(t, ctx, run.GetID())
	if prog.Phase != workflows.PhaseReadyForCutover || prog.Cutover == nil || !prog.Cutover.Reverse {
		t.Fatalf("after ReverseTraffic: %+v", prog)
	}
	t.Logf("ReverseTraffic: write pause %s; table buffer held %s; topology revision %d",
		prog.Cutover.WritePause(), prog.Cutover.BufferHeld(), prog.Cutover.Revision)
	if snap, err = st.GetTopology(ctx); err != nil {
		t.Fatal(err)
	}
	if g, _ := snap.Topology.Group("data"); len(g.KeyRanges) != 1 || g.KeyRanges[0].ShardUID != "s1" {
		t.Fatalf("topology after ReverseTraffic: group data %+v", g)
	}
	if _, err := conns[onT].Exec(ctx, `INSERT INTO customers VALUES (777778, 'too late')`); pgCode(err) != pgerr.ReadOnlySQLTransaction {
		t.Fatalf("a direct write to the fenced target %s: %v", onT, err)
	}
	if _, err := src.Exec(ctx, `INSERT INTO customers VALUES (888888, 'after ReverseTraffic')`); err != nil {
		t.Fatalf("a write to the source after ReverseTraffic: %v", err)
	}

	// SwitchTraffic again carries that write over.
	cutoverUpdate(t, ctx, run.GetID(), workflows.SwitchTrafficUpdate)
	prog = reshardProgress(t, ctx, run.GetID())
	if prog.Phase != workflows.PhaseSwitched || prog.Cutover == nil || prog.Cutover.Reverse {
		t.Fatalf("after the second SwitchTraffic: %+v", prog)
	}
	t.Logf("second SwitchTraffic: write pause %s; table buffer held %s", prog.Cutover.WritePause(), prog.Cutover.BufferHeld())
	logCutoverSteps(t, ctx, run.GetID())
	_, onT, err = placement.RouteInt(888888)
	if err != nil {
		t.Fatal(err)
	}
	waitForRow(t, ctx, conns[onT], 888888)
	if _, err := conns[onT].Exec(ctx, `UPDATE customers SET name = 'the target serves again' WHERE customer_id = 888888`); err != nil {
		t.Fatalf("a write to %s after the second SwitchTraffic: %v", onT, err)
	}
	if _, err := src.Exec(ctx, `INSERT INTO customers VALUES (999998, 'late')`); pgCode(err) != pgerr.ReadOnlySQLTransaction {
		t.Fatalf("a direct write to the source fenced again: %v", err)
	}

	// Complete ends it and leaves nothing on any instance.
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
	key := workflows.ReshardKey(run.GetID())
	for shard, c := range conns {
		for what, sql := range map[string]string{
			"slots":        "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE $1 || '%'",
			"publications": "SELECT count(*) FROM pg_publication WHERE pubname LIKE $1 || '%'",
			"origins":      "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'tessera_' || $1 || '%'",
			"triggers":     "SELECT count(*) FROM pg_trigger WHERE tgname LIKE $1 || '%'",
		} {
			var n int64
			if err := c.QueryRow(ctx, sql, key).Scan(&n); err != nil || n != 0 {
				t.Errorf("after Complete: %d %s of the reshard on %s (%v)", n, what, shard, err)
			}
		}
	}
	var left int64
	if err := src.QueryRow(ctx, "SELECT count(*) FROM customers").Scan(&left); err != nil || left != 0 {
		t.Fatalf("after Complete: %d moved rows left on the source (%v)", left, err)
	}
}

// cutoverUpdate runs a cutover update to its end. A refusal because a
// stream is behind (55000) is what an operator retries.
func cutoverUpdate(t *testing.T, ctx context.Context, id, name string) {
	t.Helper()
	for attempt := 1; ; attempt++ {
		handle, err := tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: name,
			WaitForStage: client.WorkflowUpdateStageCompleted})
		if err == nil {
			err = handle.Get(ctx, nil)
		}
		if err == nil {
			return
		}
		var appErr *temporal.ApplicationError
		if attempt == 5 || !errors.As(err, &appErr) || appErr.Type() != pgerr.ObjectNotInPrerequisiteState {
			t.Fatalf("%s (attempt %d): %v", name, attempt, err)
		}
		t.Logf("%s refused: %v", name, appErr.Message())
		time.Sleep(2 * time.Second)
	}
}

// waitForRow waits for a customer a stream carries.
func waitForRow(t *testing.T, ctx context.Context, conn *pgx.Conn, id int64) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		var n int64
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM customers WHERE customer_id = $1", id).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == 1 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("customer %d did not arrive", id)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// logCutoverSteps logs how long each cutover activity of the run took,
// from its history: where a cutover's pause goes.
func logCutoverSteps(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	it := tc.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	scheduled := map[int64]*historypb.HistoryEvent{}
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if e.GetActivityTaskScheduledEventAttributes() != nil {
			scheduled[e.EventId] = e
		}
		done := e.GetActivityTaskCompletedEventAttributes()
		if done == nil {
			continue
		}
		s := scheduled[done.ScheduledEventId]
		name := s.GetActivityTaskScheduledEventAttributes().ActivityType.Name
		if name != workflows.StreamLagActivity && name != workflows.CopyTablesActivity && name != workflows.PlanReshardActivity && name != workflows.DiffTablesActivity {
			t.Logf("%s %s: %s", e.EventTime.AsTime().Format("15:04:05.000"), name, e.EventTime.AsTime().Sub(s.EventTime.AsTime()).Round(time.Millisecond))
		}
	}
}

func reshardProgress(t *testing.T, ctx context.Context, id string) workflows.ReshardProgress {
	t.Helper()
	var prog workflows.ReshardProgress
	v, err := tc.QueryWorkflow(ctx, id, "", workflows.ProgressQuery)
	if err == nil {
		err = v.Get(&prog)
	}
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

func pgCode(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// reshardWriter inserts, updates and deletes customers, one autocommit
// statement at a time, and keeps what the source acknowledged: want maps
// each customer id to its name, "" once deleted. It pauses between
// writes: at full speed on the shared test machine it commits faster
// than one stream applies, one target transaction per source
// transaction, and the cutover is rightly refused.
const writerPause = 2 * time.Millisecond

type reshardWriter struct {
	mu   sync.Mutex
	want map[int64]string
	next int64
	n    int
}

func (w *reshardWriter) acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.n
}

// run writes until ctx ends (nil) or a write fails (its error).
func (w *reshardWriter) run(ctx context.Context, conn *pgx.Conn) error {
	rng := rand.New(rand.NewPCG(1, 2))
	for i := 0; ctx.Err() == nil; i++ {
		id := rng.Int64N(w.next-1) + 1
		var err error
		var name string
		switch i % 4 {
		case 0:
			id, name = w.next, "new "+strconv.Itoa(i)
			_, err = conn.Exec(ctx, `INSERT INTO customers VALUES ($1, $2)`, id, name)
		case 1, 2:
			name = "updated " + strconv.Itoa(i)
			var tag pgconn.CommandTag
			tag, err = conn.Exec(ctx, `UPDATE customers SET name = $2 WHERE customer_id = $1`, id, name)
			if err == nil && tag.RowsAffected() == 0 {
				continue // deleted before
			}
		case 3:
			_, err = conn.Exec(ctx, `DELETE FROM customers WHERE customer_id = $1`, id)
		}
		if err != nil {
			if ctx.Err() != nil {
				return nil
			}
			return err
		}
		w.mu.Lock()
		w.want[id], w.n = name, w.n+1
		if id == w.next {
			w.next++
		}
		w.mu.Unlock()
		time.Sleep(writerPause)
	}
	return nil
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
