package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/dev"
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/worker"
	"github.com/tesseradb/tessera/workflows"
)

// readsTopology puts database reads in group "data" on shard-1, which has
// no replica; the test moves it to shard-2, which has one.
const readsTopology = `{
  "authoritative_shard_group": "main",
  "shard_indexes": {"id_xx": {"type": "xxhash", "columns": ["id"]}},
  "shard_groups": [
    {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
    {"uid": "data", "default_shard_index": "id_xx", "key_ranges": [{"shard_uid": "shard-1"}]}
  ],
  "databases": {"reads": {"default_shard_group": "data"}}
}`

// TestReshardSwitchReadsThenWrites runs a reads-first cutover on the real
// Temporal server through a real router: a reshard of group data from
// shard-1 (no replica) to shard-2 (one replica). SwitchTraffic of reads
// sends replica sessions' reads to shard-2's replica — which the forward
// stream keeps current with writes still taken by shard-1 — while primary
// sessions' reads and writes stay on shard-1; ReverseTraffic of reads puts
// replica reads back on shard-1, which has no replica to serve them;
// SwitchTraffic of reads again, then of writes, moves everything to
// shard-2 and ends the override; Complete ends the reshard. Each read
// names the instance that answered (its port and whether it is in
// recovery).
func TestReshardSwitchReadsThenWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	base, err := os.MkdirTemp("", "e2e-reshard-reads-")
	if err != nil {
		t.Fatal(err)
	}
	os.Chmod(base, 0o755)
	t.Cleanup(func() { os.RemoveAll(base) })
	topoFile := filepath.Join(base, "topology.json")
	if err := os.WriteFile(topoFile, []byte(readsTopology), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := dev.Start(ctx, dev.Config{
		DataDir:      filepath.Join(base, "data"),
		Shards:       2,
		NoReplicas:   true,
		TopologyFile: topoFile,
		BasePort:     dev.TestPort(26133),
		EtcdPort:     -1,
		RouterPort:   -1,
		Logger:       slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop(context.Background()) })
	// The target, with the replica that will serve its replica reads.
	if _, err := c.CreateShard(ctx, "shard-2", 1); err != nil {
		t.Fatal(err)
	}
	rc := &reshardCluster{c: c}
	for _, s := range []string{"shard-0", "shard-1", "shard-2"} {
		if _, err := rc.directDB(t, ctx, s, "postgres").Exec(ctx, "CREATE DATABASE reads"); err != nil {
			t.Fatal(err)
		}
		if _, err := rc.directDB(t, ctx, s, "reads").Exec(ctx, "CREATE TABLE items (id bigint PRIMARY KEY, v text)"); err != nil {
			t.Fatal(err)
		}
	}
	const seeded = 100
	if _, err := rc.directDB(t, ctx, "shard-1", "reads").Exec(ctx, "INSERT INTO items SELECT i, 'v' || i FROM generate_series(1, $1) i", seeded); err != nil {
		t.Fatal(err)
	}
	pwFile := filepath.Join(base, "replicator-password")
	if err := os.WriteFile(pwFile, []byte("postgres"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := worker.Start(ctx, worker.Config{
		TemporalAddr: temporalSrv.FrontendAddr(), EtcdEndpoints: c.Info().Etcd, Cluster: c.Info().Cluster, Secret: c.Secret(),
		ID: "reshard-reads", Admin: true, ReplicatorPasswordFile: pwFile,
		Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	eventually(t, time.Minute, "shard-2's primary is recorded", func() error {
		st, err := c.Store().GetShardState(ctx, "shard-2")
		if err == nil && st.Primary == "" {
			err = errors.New("no recorded primary")
		}
		return err
	})

	// who answers: "shard/role" of the instance a read by key reached.
	who := map[string]string{}
	for _, s := range c.Info().Shards {
		for _, in := range s.Instances {
			who[fmt.Sprint(in.Port)] = s.UID
		}
	}
	routerDSN := fmt.Sprintf("postgres://postgres:postgres@%s/reads?sslmode=disable", c.Info().Router)
	primary, err := pgx.Connect(ctx, routerDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Close(context.Background())
	replica, err := pgx.Connect(ctx, routerDSN)
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close(context.Background())
	if _, err := replica.Exec(ctx, "SET tessera.target = 'replica'"); err != nil {
		t.Fatal(err)
	}
	read := func(conn *pgx.Conn, id int) (string, error) {
		var port, v string
		var recovery bool
		// The simple protocol: pgx's Describe of a replica session goes
		// to the authoritative shard's replica, and shard-0 has none.
		err := conn.QueryRow(ctx, "SELECT current_setting('port'), pg_is_in_recovery(), v FROM items WHERE id = $1",
			pgx.QueryExecModeSimpleProtocol, id).Scan(&port, &recovery, &v)
		if err != nil {
			return "", err
		}
		role := "primary"
		if recovery {
			role = "replica"
		}
		return who[port] + "/" + role + " " + v, nil
	}
	expect := func(what string, conn *pgx.Conn, id int, want string) {
		t.Helper()
		last := ""
		eventually(t, 20*time.Second, what, func() error {
			got, err := read(conn, id)
			if err == nil && got != want {
				err = fmt.Errorf("read %q, want %q", got, want)
			}
			if err != nil && err.Error() != last {
				last = err.Error()
				t.Logf("%s: %v", what, err)
			}
			return err
		})
	}
	// Before: replica reads of the group have no replica to go to.
	noReplica := func(what string) {
		t.Helper()
		if _, err := read(replica, 1); pgCode(err) != "08006" || !strings.Contains(err.Error(), "shard shard-1 has no replica") {
			t.Fatalf("%s: %v (want 08006: shard-1 has no replica)", what, err)
		}
	}
	noReplica("a replica read before the switch")

	id := workflows.ReshardID("reads", "data")
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.ReshardName,
		workflows.ReshardInput{Database: "reads", ShardGroup: "data", TargetKeyRanges: []workflows.KeyRangeInput{{ShardUID: "shard-2"}}})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*time.Minute, "ready for the cutover", func() error {
		if p := reshardProgress(t, ctx, id); p.Phase != workflows.PhaseReadyForCutover {
			return fmt.Errorf("phase %s", p.Phase)
		}
		return nil
	})
	reads := workflows.TrafficInput{Traffic: workflows.TrafficReads}

	// Reads first.
	begun := time.Now()
	trafficUpdate(t, ctx, id, workflows.SwitchTrafficUpdate, reads)
	t.Logf("SwitchTraffic of reads returned after %s", time.Since(begun).Round(time.Millisecond))
	prog := reshardProgress(t, ctx, id)
	if prog.Phase != workflows.PhaseReadyForCutover || prog.ReadsSwitched == nil || prog.Cutover != nil {
		t.Fatalf("progress after the reads switch: %+v", prog)
	}
	snap, err := c.Store().GetTopology(ctx)
	if err != nil || !snap.Topology.HasReplicaReads() || snap.Revision != prog.ReadsSwitched.Revision {
		t.Fatalf("stored topology after the reads switch: %+v, %v", snap, err)
	}
	expect("a replica read after the reads switch", replica, 1, "shard-2/replica v1")
	expect("a primary read after the reads switch", primary, 1, "shard-1/primary v1")
	// Writes still go to shard-1; the stream carries them to shard-2 and
	// its replica serves them.
	if _, err := primary.Exec(ctx, "INSERT INTO items VALUES ($1, 'after reads')", seeded+1); err != nil {
		t.Fatal(err)
	}
	expect("a write after the reads switch", primary, seeded+1, "shard-1/primary after reads")
	expect("the write, read from the target's replica", replica, seeded+1, "shard-2/replica after reads")
	// Complete needs the writes switched.
	if err := sendTraffic(ctx, id, workflows.CompleteUpdate); pgCode(err) != "" || !refusedAs(err, pgerr.ObjectNotInPrerequisiteState) {
		t.Fatalf("Complete with only reads switched: %v", err)
	}

	// Reverse reads: back on shard-1, which has no replica.
	trafficUpdate(t, ctx, id, workflows.ReverseTrafficUpdate, reads)
	if p := reshardProgress(t, ctx, id); p.ReadsSwitched != nil || p.Phase != workflows.PhaseReadyForCutover {
		t.Fatalf("progress after ReverseTraffic of reads: %+v", p)
	}
	noReplica("a replica read after ReverseTraffic of reads")

	// Reads again, then writes.
	trafficUpdate(t, ctx, id, workflows.SwitchTrafficUpdate, reads)
	expect("a replica read after the second reads switch", replica, 1, "shard-2/replica v1")
	begun = time.Now()
	trafficUpdate(t, ctx, id, workflows.SwitchTrafficUpdate, workflows.TrafficInput{})
	t.Logf("SwitchTraffic of writes returned after %s", time.Since(begun).Round(time.Millisecond))
	prog = reshardProgress(t, ctx, id)
	if prog.Phase != workflows.PhaseSwitched || prog.ReadsSwitched != nil || prog.Cutover == nil {
		t.Fatalf("progress after the writes switch: %+v", prog)
	}
	if snap, err := c.Store().GetTopology(ctx); err != nil || snap.Topology.HasReplicaReads() {
		t.Fatalf("stored topology after the writes switch keeps replica key ranges: %v", err)
	}
	expect("a primary read after the writes switch", primary, seeded+1, "shard-2/primary after reads")
	expect("a replica read after the writes switch", replica, seeded+1, "shard-2/replica after reads")
	trafficUpdate(t, ctx, id, workflows.CompleteUpdate, nil)
	var res workflows.ReshardResult
	if err := run.Get(ctx, &res); err != nil || res.Phase != workflows.PhaseCompleted {
		t.Fatalf("ended %+v, %v", res, err)
	}
	var n int
	if err := primary.QueryRow(ctx, "SELECT count(*) FROM items").Scan(&n); err != nil || n != seeded+1 {
		t.Fatalf("%d rows through the router after Complete, %v", n, err)
	}
}

// sendTraffic sends an update with its argument, if any, and returns its
// outcome.
func sendTraffic(ctx context.Context, id, name string, args ...any) error {
	h, err := tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: name,
		WaitForStage: client.WorkflowUpdateStageCompleted, Args: args})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	return err
}

// trafficUpdate is cutoverUpdate with an argument: a refusal for now
// (55000: the streams are behind) is retried a few times.
func trafficUpdate(t *testing.T, ctx context.Context, id, name string, in any) {
	t.Helper()
	var args []any
	if in != nil {
		args = []any{in}
	}
	for attempt := 1; ; attempt++ {
		err := sendTraffic(ctx, id, name, args...)
		if err == nil {
			return
		}
		if attempt == 5 || !refusedAs(err, pgerr.ObjectNotInPrerequisiteState) {
			t.Fatalf("%s %v (attempt %d): %v", name, in, attempt, err)
		}
		t.Logf("%s refused: %v", name, err)
		time.Sleep(2 * time.Second)
	}
}

func refusedAs(err error, code string) bool {
	var appErr *temporal.ApplicationError
	return errors.As(err, &appErr) && appErr.Type() == code
}

// switchReadsFirst asks a reshard of shop.data onto t1 and t2 to switch
// its replica reads: refused (55000) while neither target has a replica
// sidecar record, then done once each has one; the stored topology's
// replica view then places the group on the targets.
func switchReadsFirst(t *testing.T, ctx context.Context, st *store.Store, id string) {
	t.Helper()
	reads := workflows.TrafficInput{Traffic: workflows.TrafficReads}
	for attempt := 1; ; attempt++ {
		err := sendTraffic(ctx, id, workflows.SwitchTrafficUpdate, reads)
		if refusedAs(err, pgerr.ObjectNotInPrerequisiteState) && strings.Contains(err.Error(), "no replica serving") {
			t.Logf("SwitchTraffic of reads without replicas: %v", err)
			break
		}
		// The lag bound may refuse it first, under the writer.
		if attempt == 5 || !refusedAs(err, pgerr.ObjectNotInPrerequisiteState) {
			t.Fatalf("SwitchTraffic of reads with no replica on the targets: %v", err)
		}
		time.Sleep(2 * time.Second)
	}
	for _, s := range []string{"t1", "t2"} {
		reg, err := st.Register(ctx, store.Record{Kind: store.KindSidecar, ID: s + "-1", ShardUID: s, InstanceID: s + "-1",
			Role: store.RoleReplica, GRPCAddr: "127.0.0.1:1"}, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reg.Close(context.Background()) })
	}
	trafficUpdate(t, ctx, id, workflows.SwitchTrafficUpdate, reads)
	p := reshardProgress(t, ctx, id)
	snap, err := st.GetTopology(ctx)
	if err != nil || p.ReadsSwitched == nil || p.Phase != workflows.PhaseReadyForCutover || snap.Revision != p.ReadsSwitched.Revision ||
		snap.Topology.ReplicaReads().Resolve("shop", "public", "customers").Describe() != "data{[,80)=t1 [80,)=t2} by customer_xx(xxhash(customer_id))" ||
		snap.Topology.Resolve("shop", "public", "customers").Describe() != "data{[,)=s1} by customer_xx(xxhash(customer_id))" {
		t.Fatalf("after the reads switch: progress %+v, topology %+v, %v", p, snap, err)
	}
}
