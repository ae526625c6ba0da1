package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/dev"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/worker"
	"github.com/tesseradb/tessera/workflows"
)

// routedTopology puts database shop's tables in group "data" on
// shard-1; every table is keyed by a column id (bigint, text or uuid).
const routedTopology = `{
  "authoritative_shard_group": "main",
  "shard_indexes": {"id_xx": {"type": "xxhash", "columns": ["id"]}},
  "shard_groups": [
    {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
    {"uid": "data", "default_shard_index": "id_xx", "key_ranges": [{"shard_uid": "shard-1"}]}
  ],
  "databases": {"shop": {"default_shard_group": "data"}}
}`

// dataShards are the shards the group moves between.
var dataShards = []string{"shard-1", "shard-2", "shard-3", "shard-4", "shard-5", "shard-6"}

const reshardWriters = 4

// TestReshardThroughRouter is issue #14's acceptance test: clients write
// through the router (inserts, updates, deletes, re-inserts of deleted
// keys; bigint, text and uuid keys; NULLs; payloads over 2 kB) while
// the group is split 1→2 (SwitchTraffic and ReverseTraffic twice in a
// row first, then SwitchTraffic), 2→4, and merged 4→2 (each target the
// merge of two sources), each ended by Complete; then a merge 2→1 is
// switched, reversed and cancelled. After each reshard the rows, through
// the router and on each shard, are exactly what the clients' logs of
// acknowledged writes say (nothing lost, duplicated or resurrected, every
// row on the shard its key routes to), no client statement failed, and
// nothing of the reshard (slot, publication, origin, trigger) is left on
// any instance. Each cutover's pause is logged: the workflow's report and
// each writer's longest gap between acknowledged writes.
func TestReshardThroughRouter(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rc := startReshardCluster(t, ctx)

	hold := &sync.RWMutex{}
	clients := make([]*reshardClient, reshardWriters)
	var seedRows [3][][]any
	for i := range clients {
		clients[i] = newReshardClient(i, rc.routerConn(t, ctx), hold)
		rows := clients[i].seed(500)
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
	started := time.Now()

	steps := []struct {
		name    string
		ranges  []workflows.KeyRangeInput
		actions []string // cutover updates, then Complete or Cancel
	}{
		{"split 1→2", ranges("shard-2", "shard-3"),
			[]string{workflows.SwitchTrafficUpdate, workflows.ReverseTrafficUpdate, workflows.SwitchTrafficUpdate, workflows.ReverseTrafficUpdate,
				workflows.SwitchTrafficUpdate, workflows.CompleteUpdate}},
		{"split 2→4", ranges("shard-1", "shard-4", "shard-5", "shard-6"),
			[]string{workflows.SwitchTrafficUpdate, workflows.CompleteUpdate}},
		{"merge 4→2", ranges("shard-2", "shard-3"),
			[]string{workflows.SwitchTrafficUpdate, workflows.CompleteUpdate}},
		{"merge 2→1, cancelled", ranges("shard-1"),
			[]string{workflows.SwitchTrafficUpdate, workflows.ReverseTrafficUpdate, workflows.CancelSignal}},
	}
	var figures []string
	for _, step := range steps {
		figures = append(figures, rc.reshard(t, ctx, step.name, step.ranges, step.actions, clients)...)
		rc.checkRows(t, ctx, hold, clients, step.name)
		rc.checkNothingLeft(t, ctx, step.name)
	}
	stopWriting()
	wg.Wait()
	total, errs := 0, 0
	for _, c := range clients {
		total += c.acked
		errs += len(c.errs)
		for _, e := range c.errs {
			t.Errorf("writer %d: %s", c.id, e)
		}
		for _, a := range c.anomalies {
			t.Errorf("writer %d: %s", c.id, a)
		}
	}
	elapsed := time.Since(started)
	load, _ := exec.Command("uptime").Output()
	t.Logf("%d writers: %d acknowledged writes in %s (%.0f/s), %d errors; load: %s", len(clients), total, elapsed.Round(time.Second),
		float64(total)/elapsed.Seconds(), errs, strings.TrimSpace(string(load)))
	for _, f := range figures {
		t.Log(f)
	}
}

// maxCutoverGap bounds each writer's longest gap between acknowledged
// writes across a cutover: what a loaded 2-core machine reliably meets
// (with a load average of 14 a first ReverseTraffic took 4.3 s). The
// goal, 1 s, is reported (docs/operations.md), not asserted.
const maxCutoverGap = 6 * time.Second

// reshardCluster is the test's own dev cluster: shard-0 for the
// authoritative group and six data shards, no replicas, a router, and a
// worker against the package's Temporal server.
type reshardCluster struct {
	c   *dev.Cluster
	top func() *topo.Topology
	// shards are the data shards (dataShards unless told otherwise).
	shards []string
	// readyWithin bounds the wait for a reshard's cutover readiness (2
	// minutes when zero); whileMoving, when set, is called with the
	// progress at each poll of that wait.
	readyWithin time.Duration
	whileMoving func(workflows.ReshardProgress)
	// pwFile holds the replicator's password.
	pwFile string
	// bulkKeys: keys 1..bulkKeys of an integer-keyed table are a bulk
	// seed no writer touches, which checkRows leaves to the test.
	bulkKeys int64
}

func startReshardCluster(t *testing.T, ctx context.Context) *reshardCluster {
	return startReshardClusterOf(t, ctx, dataShards, nil)
}

// startReshardClusterOf starts the cluster with the data shards given
// (newReshardClusterOf) and a worker with an admin in this process.
func startReshardClusterOf(t *testing.T, ctx context.Context, shards []string, replicas map[string]int) *reshardCluster {
	t.Helper()
	rc := newReshardClusterOf(t, ctx, shards, replicas)
	rc.startWorker(t, ctx, "reshard-router")
	return rc
}

// newReshardCluster starts the cluster with the given data shards, no
// replicas and no worker.
func newReshardCluster(t *testing.T, ctx context.Context, shards []string) *reshardCluster {
	return newReshardClusterOf(t, ctx, shards, nil)
}

// newReshardClusterOf starts the cluster with the data shards given, and
// no worker; replicas, when set, creates them after shard-0 with that
// many replicas each, and then applies routedTopology (the group on
// shard-1).
func newReshardClusterOf(t *testing.T, ctx context.Context, shards []string, replicas map[string]int) *reshardCluster {
	t.Helper()
	base, err := os.MkdirTemp("", "e2e-reshard-router-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o755)
	t.Cleanup(func() { os.RemoveAll(base) })
	topoFile := filepath.Join(base, "topology.json")
	first, nShards := routedTopology, 1+len(shards)
	if replicas != nil {
		// The data group starts on shard-0, the only shard dev starts.
		first, nShards = strings.Replace(routedTopology, `"shard_uid": "shard-1"`, `"shard_uid": "shard-0"`, 1), 1
	}
	if err := os.WriteFile(topoFile, []byte(first), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := dev.Start(ctx, dev.Config{
		DataDir:      filepath.Join(base, "data"),
		Shards:       nShards,
		NoReplicas:   true,
		TopologyFile: topoFile,
		BasePort:     dev.TestPort(22733),
		EtcdPort:     -1,
		RouterPort:   -1,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(context.Background()) })
	rc := &reshardCluster{c: c, shards: shards}
	if replicas != nil {
		for _, s := range shards {
			if _, err := c.CreateShard(ctx, s, replicas[s]); err != nil {
				t.Fatal(err)
			}
		}
		top, err := topo.Parse([]byte(routedTopology))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.Store().ApplyTopology(ctx, top, store.ApplyOptions{Force: true, ExpectedRevision: store.AnyRevision}); err != nil {
			t.Fatal(err)
		}
	}
	rc.top = func() *topo.Topology {
		snap, err := c.Store().GetTopology(ctx)
		if err != nil {
			t.Fatal(err)
		}
		return snap.Topology
	}
	// The target shards exist beforehand, with the group's tables.
	for _, s := range append([]string{"shard-0"}, shards...) {
		admin := rc.directDB(t, ctx, s, "postgres")
		if _, err := admin.Exec(ctx, "CREATE DATABASE shop"); err != nil {
			t.Fatal(err)
		}
		// shard-0 too: the router reads the tables' definitions from the
		// authoritative group's shard, where DDL through it would put them.
		conn := rc.direct(t, ctx, s)
		for _, sql := range shardTableDDL() {
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Fatal(err)
			}
		}
	}
	rc.pwFile = filepath.Join(base, "replicator-password")
	if err := os.WriteFile(rc.pwFile, []byte("postgres"), 0o600); err != nil {
		t.Fatal(err)
	}
	return rc
}

// startWorker starts a worker in this process, with an admin, and waits
// until every data shard's primary is recorded. The test's end stops it,
// if the caller has not.
func (rc *reshardCluster) startWorker(t *testing.T, ctx context.Context, id string) *worker.Worker {
	t.Helper()
	c := rc.c
	w, err := worker.Start(ctx, worker.Config{
		TemporalAddr:  temporalSrv.FrontendAddr(),
		EtcdEndpoints: c.Info().Etcd,
		Cluster:       c.Info().Cluster,
		Secret:        c.Secret(),
		ID:            id,
		// Its admin records each shard's primary, which a reshard's
		// targets need, as tessera dev's does.
		Admin:                  true,
		ReplicatorPasswordFile: rc.pwFile,
		Logger:                 slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	eventually(t, time.Minute, "every shard's primary is recorded", func() error {
		for _, s := range rc.shards {
			st, err := c.Store().GetShardState(ctx, s)
			if err != nil {
				return err
			}
			if st.Primary == "" {
				return fmt.Errorf("%s has no recorded primary", s)
			}
		}
		return nil
	})
	return w
}

func (rc *reshardCluster) routerConn(t *testing.T, ctx context.Context) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@%s/shop?sslmode=disable", rc.c.Info().Router))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func (rc *reshardCluster) direct(t *testing.T, ctx context.Context, shard string) *pgx.Conn {
	return rc.directDB(t, ctx, shard, "shop")
}

// directDB connects to a shard's primary, past the router: the one the
// store records, or the shard's first instance before one is recorded.
func (rc *reshardCluster) directDB(t *testing.T, ctx context.Context, shard, database string) *pgx.Conn {
	t.Helper()
	for _, s := range rc.c.Info().Shards {
		if s.UID != shard {
			continue
		}
		port := s.Instances[0].Port
		if st, err := rc.c.Store().GetShardState(ctx, shard); err == nil {
			for _, in := range s.Instances {
				if in.ID == st.Primary {
					port = in.Port
				}
			}
		}
		conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/%s?sslmode=disable", port, database))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	t.Fatalf("no shard %s", shard)
	return nil
}

// ranges splits the routing space evenly over shards.
func ranges(shards ...string) []workflows.KeyRangeInput {
	out := make([]workflows.KeyRangeInput, len(shards))
	step := 256 / len(shards)
	for i, s := range shards {
		out[i].ShardUID = s
		if i > 0 {
			out[i].Start = fmt.Sprintf("%02x", i*step)
		}
		if i < len(shards)-1 {
			out[i].End = fmt.Sprintf("%02x", (i+1)*step)
		}
	}
	return out
}

// reshard runs one reshard of the group to ranges under the writers:
// it waits for the cutover's readiness (a clean VDiff), runs the
// actions in turn, and returns each cutover's figures.
func (rc *reshardCluster) reshard(t *testing.T, ctx context.Context, name string, to []workflows.KeyRangeInput, actions []string, clients []*reshardClient) []string {
	t.Helper()
	id := workflows.ReshardID("shop", "data")
	begun := time.Now()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.ReshardName,
		workflows.ReshardInput{Database: "shop", ShardGroup: "data", TargetKeyRanges: to})
	if err != nil {
		t.Fatal(err)
	}
	awaitReadyWithin(t, ctx, run, name, begun, rc.readyWithin, rc.whileMoving)
	var figures []string
	for _, action := range actions {
		switch action {
		case workflows.CompleteUpdate:
			cutoverUpdate(t, ctx, id, action)
			var res workflows.ReshardResult
			if err := run.Get(ctx, &res); err != nil || res.Phase != workflows.PhaseCompleted {
				t.Fatalf("%s: ended %+v, %v", name, res, err)
			}
		case workflows.CancelSignal:
			if err := tc.SignalWorkflow(ctx, id, "", workflows.CancelSignal, nil); err != nil {
				t.Fatal(err)
			}
			var res workflows.ReshardResult
			if err := run.Get(ctx, &res); err != nil || res.Phase != workflows.PhaseCancelled {
				t.Fatalf("%s: ended %+v, %v", name, res, err)
			}
			// Rows the cancelled reshard copied stay on its targets
			// (docs/operations.md); the operator deletes them.
			rc.truncate(t, ctx, to)
		default:
			figures = append(figures, rc.cutover(t, ctx, name, id, action, clients))
		}
	}
	t.Logf("%s: done after %s", name, time.Since(begun).Round(time.Millisecond))
	return figures
}

// cutover runs SwitchTraffic or ReverseTraffic and measures the pause:
// the workflow's report, and each writer's longest gap between
// acknowledged writes from the request until every writer has had a
// write acknowledged after it returned.
func (rc *reshardCluster) cutover(t *testing.T, ctx context.Context, name, id, action string, clients []*reshardClient) string {
	t.Helper()
	asked := time.Now()
	for _, c := range clients {
		c.resetGap(asked)
	}
	cutoverUpdate(t, ctx, id, action)
	returned := time.Now()
	gaps := make([]time.Duration, len(clients))
	eventually(t, 30*time.Second, "every writer writes after the cutover", func() error {
		for i, c := range clients {
			gap, after := c.gapSince(returned)
			if !after {
				c.mu.Lock()
				defer c.mu.Unlock()
				return fmt.Errorf("writer %d has no acknowledged write after the cutover (%d acknowledged, errors %q)", c.id, c.acked, c.errs)
			}
			gaps[i] = gap.Round(time.Millisecond)
		}
		return nil
	})
	prog := reshardProgress(t, ctx, id)
	rep := prog.Cutover
	if rep == nil || rep.Reverse != (action == workflows.ReverseTrafficUpdate) {
		t.Fatalf("%s %s: cutover report %+v", name, action, rep)
	}
	if len(rep.RoutersWaiting) > 0 {
		t.Errorf("%s %s: routers %v had not applied revision %d", name, action, rep.RoutersWaiting, rep.Revision)
	}
	routers, err := rc.c.Store().ListRecords(ctx, store.KindRouter)
	if err != nil || len(routers) != 1 || routers[0].TopologyRevision < rep.Revision {
		t.Fatalf("%s %s: router records %+v (%v), want one at revision %d or later", name, action, routers, err, rep.Revision)
	}
	fig := fmt.Sprintf("%s %s: write pause (fence to switch) %s, buffer held %s, update took %s, writers' longest gaps %v",
		name, action, rep.WritePause().Round(time.Millisecond), rep.BufferHeld().Round(time.Millisecond),
		returned.Sub(asked).Round(time.Millisecond), gaps)
	t.Log(fig)
	for i, g := range gaps {
		if g > maxCutoverGap {
			t.Errorf("%s %s: writer %d waited %s between acknowledged writes (bound %s)", name, action, clients[i].id, g, maxCutoverGap)
		}
	}
	return fig
}

// truncate empties the group's tables on shards.
func (rc *reshardCluster) truncate(t *testing.T, ctx context.Context, on []workflows.KeyRangeInput) {
	t.Helper()
	for _, r := range on {
		var names []string
		for _, tb := range shardTables {
			names = append(names, tb.name)
		}
		if _, err := rc.direct(t, ctx, r.ShardUID).Exec(ctx, "TRUNCATE "+strings.Join(names, ", ")); err != nil {
			t.Fatal(err)
		}
	}
}

// checkRows pauses the writers and compares, with every writer's log,
// the rows the router answers and the rows on each data shard: every
// row on the shard its key routes to by the topology now, and nowhere
// else.
func (rc *reshardCluster) checkRows(t *testing.T, ctx context.Context, hold *sync.RWMutex, clients []*reshardClient, name string) {
	t.Helper()
	rc.checkRowsOn(t, ctx, hold, clients, name, rc.shards)
}

// checkRowsOn is checkRows looking only at the given data shards: in
// the middle of a reshard the shards the group does not route to hold
// copies the streams keep.
func (rc *reshardCluster) checkRowsOn(t *testing.T, ctx context.Context, hold *sync.RWMutex, clients []*reshardClient, name string, shards []string) {
	t.Helper()
	hold.Lock()
	defer hold.Unlock()
	top := rc.top()
	router := rc.routerConn(t, ctx)
	for ti, tb := range clients[0].tables {
		place := top.Resolve("shop", "public", tb.name)
		typ := shardfunc.Text
		if tb.keyType == "uuid" {
			typ = shardfunc.UUID
		}
		from := tb.name
		if tb.keyType == "integer" && rc.bulkKeys > 0 {
			from += fmt.Sprintf(" WHERE id > %d", rc.bulkKeys)
		}
		viaRouter := readRows(t, ctx, router, from)
		onShard := map[string]map[string]rowValue{}
		for _, s := range append([]string{"shard-0"}, shards...) {
			onShard[s] = readRows(t, ctx, rc.direct(t, ctx, s), from)
		}
		compared := 0
		for _, c := range clients {
			c.mu.Lock()
			check := func(k string, want rowValue, present bool) {
				if c.uncertain[rowKey{ti, k}] {
					delete(viaRouter, k)
					for _, rows := range onShard {
						delete(rows, k)
					}
					return
				}
				compared++
				var shard string
				var err error
				if tb.keyType == "bigint" || tb.keyType == "integer" {
					var n int64
					fmt.Sscan(k, &n)
					_, shard, err = place.RouteInt(n)
				} else {
					_, shard, err = place.Route(typ, shardfunc.TextFormat, []byte(k))
				}
				if err != nil {
					t.Fatal(err)
				}
				for _, where := range []struct {
					what string
					rows map[string]rowValue
				}{{"through the router", viaRouter}, {"on " + shard, onShard[shard]}} {
					got, ok := where.rows[k]
					switch {
					case !present && ok:
						t.Errorf("%s: %s %s deleted (acknowledged) but %s: resurrected %v", name, tb.name, k, where.what, got)
					case present && !ok:
						t.Errorf("%s: %s %s lost %s: want %v", name, tb.name, k, where.what, want)
					case present && !sameValue(got, want):
						t.Errorf("%s: %s %s %s is %v, want %v", name, tb.name, k, where.what, got, want)
					}
					delete(where.rows, k)
				}
			}
			for rk, v := range c.want {
				if rk.table == ti {
					check(rk.key, v, true)
				}
			}
			for rk := range c.gone {
				if rk.table == ti {
					check(rk.key, rowValue{}, false)
				}
			}
			// A key whose first statement, an INSERT, was cut off is in
			// neither log: it may have committed all the same.
			for rk := range c.uncertain {
				if rk.table == ti {
					check(rk.key, rowValue{}, false)
				}
			}
			c.mu.Unlock()
		}
		if len(viaRouter) > 0 {
			t.Errorf("%s: %d rows of %s through the router that no acknowledged write made (duplicated or stray), e.g. %v", name, len(viaRouter), tb.name, anyKey(viaRouter))
		}
		for s, rows := range onShard {
			if len(rows) > 0 {
				t.Errorf("%s: %d rows of %s on %s that belong elsewhere or no acknowledged write made, e.g. %v", name, len(rows), tb.name, s, anyKey(rows))
			}
		}
		t.Logf("%s: %s: %d keys compared through the router and on their shards", name, tb.name, compared)
	}
}

func sameValue(a, b rowValue) bool {
	for i := range a {
		if (a[i] == nil) != (b[i] == nil) || a[i] != nil && *a[i] != *b[i] {
			return false
		}
	}
	return true
}

func anyKey(rows map[string]rowValue) string {
	for k := range rows {
		return k
	}
	return ""
}

// readRows reads a table's rows by key; from is the table's name, with a
// WHERE clause if need be. It reads in the simple protocol: through a
// router, a prepared read of a table whose column type has since changed
// can meet, on a pooled backend, the content-named statement an earlier
// session left there, and fail once with 0A000 (docs/router.md).
func readRows(t *testing.T, ctx context.Context, conn *pgx.Conn, from string) map[string]rowValue {
	t.Helper()
	rows, err := conn.Query(ctx, "SELECT id::text, name, note, payload FROM "+from, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]rowValue{}
	for rows.Next() {
		var k string
		var v rowValue
		if err := rows.Scan(&k, &v[0], &v[1], &v[2]); err != nil {
			t.Fatal(err)
		}
		if _, dup := out[k]; dup {
			t.Errorf("%s: key %s twice", from, k)
		}
		out[k] = v
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

// checkNothingLeft: no slot, publication, replication origin or trigger
// of a reshard on any instance, replicas included.
func (rc *reshardCluster) checkNothingLeft(t *testing.T, ctx context.Context, name string) {
	t.Helper()
	key := workflows.ReshardKey(workflows.ReshardID("shop", "data"))
	for _, sh := range rc.c.Info().Shards {
		if sh.UID != "shard-0" && !slices.Contains(rc.shards, sh.UID) {
			continue
		}
		for _, in := range sh.Instances {
			rc.checkNothingLeftOn(t, ctx, name, in, key)
		}
	}
}

func (rc *reshardCluster) checkNothingLeftOn(t *testing.T, ctx context.Context, name string, in dev.InstanceInfo, key string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/shop?sslmode=disable", in.Port))
	if err != nil {
		t.Errorf("%s: %s: %v", name, in.ID, err)
		return
	}
	defer conn.Close(context.Background())
	s := in.ID
	{
		for what, sql := range map[string]string{
			// Physical slots are the replicas'; a reshard makes logical ones.
			"slots":        "SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical'",
			"publications": "SELECT count(*) FROM pg_publication",
			"origins":      "SELECT count(*) FROM pg_replication_origin",
			"triggers":     "SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal",
			// The table exists only where a copy ran.
			"copy progress rows": "SELECT CASE WHEN to_regclass('_tessera.copy_progress') IS NULL THEN 0 ELSE " +
				"(xpath('/row/n/text()', query_to_xml('SELECT count(*) AS n FROM _tessera.copy_progress WHERE workflow = ''" + key + "''', false, true, '')))[1]::text::int8 END",
		} {
			var n int64
			if err := conn.QueryRow(ctx, sql).Scan(&n); err != nil || n != 0 {
				t.Errorf("%s: %d %s left on %s (%v)", name, n, what, s, err)
			}
		}
	}
}

// textRows feeds seed rows to CopyFrom.
func textRows(rows [][]any) pgx.CopyFromSource {
	return pgx.CopyFromRows(rows)
}

// awaitReady waits for a movement's cutover readiness, with a clean
// VDiff, for 2 minutes at most.
func awaitReady(t *testing.T, ctx context.Context, run client.WorkflowRun, name string, begun time.Time) {
	t.Helper()
	awaitReadyWithin(t, ctx, run, name, begun, 0, nil)
}

// awaitReadyWithin waits for a movement's cutover readiness, with a clean
// VDiff, for readyWithin at most (2 minutes when zero); whileMoving, when
// set, is called with the progress at each poll.
func awaitReadyWithin(t *testing.T, ctx context.Context, run client.WorkflowRun, name string, begun time.Time, readyWithin time.Duration, whileMoving func(workflows.ReshardProgress)) {
	t.Helper()
	id := run.GetID()
	var prog workflows.ReshardProgress
	within := readyWithin
	if within == 0 {
		within = 2 * time.Minute
	}
	deadline, shown := time.Now().Add(within), time.Now()
	for prog.Phase != workflows.PhaseReadyForCutover {
		if d, err := tc.DescribeWorkflowExecution(ctx, id, ""); err == nil && d.WorkflowExecutionInfo.Status != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			t.Fatalf("%s: the reshard ended: %v", name, run.Get(ctx, nil))
		}
		if time.Now().After(deadline) || prog.Error != "" {
			if d, err := tc.DescribeWorkflowExecution(ctx, id, ""); err == nil {
				for _, a := range d.PendingActivities {
					t.Logf("pending %s: attempt %d, last failure %v", a.ActivityType.GetName(), a.Attempt, a.LastFailure)
				}
			}
			t.Fatalf("%s: not ready for cutover after %s: %+v", name, time.Since(begun).Round(time.Second), prog)
		}
		if time.Since(shown) > 10*time.Second {
			t.Logf("%s: %s after %s: copied %v, streams %v", name, prog.Phase, time.Since(begun).Round(time.Second), prog.Copied, prog.Streams)
			shown = time.Now()
		}
		time.Sleep(300 * time.Millisecond)
		prog = reshardProgress(t, ctx, id)
		if whileMoving != nil {
			whileMoving(prog)
		}
	}
	if d := prog.LastDiff; d == nil || !d.Done || d.Differences != 0 {
		t.Fatalf("%s: VDiff %+v", name, d)
	}
	t.Logf("%s: ready for cutover after %s, VDiff clean, copied %v, streams %v", name, time.Since(begun).Round(time.Millisecond), prog.Copied, prog.Streams)
}
