package actions

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
	"github.com/tesseradb/tessera/workflows"
)

// TestSwitchReplicaReads runs a reads-first SwitchTraffic's topology
// changes on a real etcd: refused while a target has no replica, then the
// group's replica key ranges become the targets' (idempotently), the
// placement guard refuses anyone else the same change, switching them
// off removes them, and a switch of writes after a reads switch leaves
// the group on the targets with no replica override.
func TestSwitchReplicaReads(t *testing.T) {
	ctx := testCtx(t)
	st, err := store.Dial(ctx, etcdembed.Start(t), "reads")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	top := parseTopology(t)
	if _, err := st.ApplyTopology(ctx, top, store.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	a := &Actions{Store: st}
	plan, err := planTopology(top, workflows.PlanReshardInput{WorkflowID: "reshard-shop-data",
		Input: workflows.ReshardInput{Database: "shop", ShardGroup: "data", TargetKeyRanges: splitRanges}})
	if err != nil {
		t.Fatal(err)
	}
	register := func(shard, instance, role string) {
		reg, err := st.Register(ctx, store.Record{Kind: store.KindSidecar, ID: instance, ShardUID: shard, InstanceID: instance,
			Role: role, GRPCAddr: "127.0.0.1:1"}, 30*time.Second)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { reg.Close(ctx) })
	}
	register("t1", "t1-a", store.RolePrimary)
	register("t1", "t1-b", store.RoleReplica)
	register("t2", "t2-a", store.RolePrimary)
	on := workflows.ReadsInput{Plan: plan, On: true}

	// t2 has only its primary: refused, nothing written.
	if _, err := a.SwitchReplicaReads(ctx, on); sqlState(err) != pgerr.ObjectNotInPrerequisiteState {
		t.Fatalf("reads switch without a replica on t2: %v", err)
	}
	// A replica by its record's role, with no shard state naming the
	// primary; t1's shard state names t1-b the primary, so t1-a serves
	// as its replica.
	register("t2", "t2-b", store.RoleReplica)
	if _, err := st.UpdateShardState(ctx, "t1", func(s *store.ShardState) error { s.Primary = "t1-b"; return nil }); err != nil {
		t.Fatal(err)
	}
	sw, err := a.SwitchReplicaReads(ctx, on)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := st.GetTopology(ctx)
	if err != nil || snap.Revision != sw.Revision {
		t.Fatalf("topology %+v, %v; switch %+v", snap, err, sw)
	}
	if got := snap.Topology.ReplicaReads().Resolve("shop", "public", "orders").Describe(); got != "data{[,80)=t1 [80,)=t2} by customer_xx(xxhash(customer_id))" {
		t.Errorf("replica reads after the switch: %s", got)
	}
	if got := snap.Topology.Resolve("shop", "public", "orders").Describe(); got != "data{[,)=s1} by customer_xx(xxhash(customer_id))" {
		t.Errorf("primary reads and writes after a reads switch: %s", got)
	}
	if again, err := a.SwitchReplicaReads(ctx, on); err != nil || again.Revision != sw.Revision {
		t.Errorf("a retried reads switch: %+v, %v (want revision %d unchanged)", again, err, sw.Revision)
	}
	// Only a data movement may move replica reads.
	if _, err := st.ApplyTopology(ctx, top, store.ApplyOptions{ExpectedRevision: store.AnyRevision}); err == nil {
		t.Error("the placement guard let an unforced topology drop the replica key ranges")
	}

	// Off: the override goes.
	off, err := a.SwitchReplicaReads(ctx, workflows.ReadsInput{Plan: plan})
	if err != nil {
		t.Fatal(err)
	}
	if snap, err = st.GetTopology(ctx); err != nil || snap.Topology.HasReplicaReads() || off.Revision != snap.Revision {
		t.Fatalf("after switching reads back: %+v, %v", snap, err)
	}

	// Reads, then writes: the writes' switch ends the override.
	if _, err := a.SwitchReplicaReads(ctx, on); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SwitchTopology(ctx, workflows.CutoverInput{Plan: plan}); err != nil {
		t.Fatal(err)
	}
	if snap, err = st.GetTopology(ctx); err != nil || snap.Topology.HasReplicaReads() ||
		snap.Topology.Resolve("shop", "public", "orders").Describe() != "data{[,80)=t1 [80,)=t2} by customer_xx(xxhash(customer_id))" {
		t.Fatalf("after the writes' switch: %+v, %v", snap, err)
	}
	// With writes switched there are no reads to switch apart.
	if _, err := a.SwitchReplicaReads(ctx, on); sqlState(err) != pgerr.ObjectNotInPrerequisiteState {
		t.Errorf("reads switch after the writes': %v", err)
	}
}

// TestSwitchTableReplicaReads: a MoveTables' reads switch gives its
// tables replica_reads bindings in the target group — a table that
// inherited its placement gets an entry of its own that keeps it —
// switching off restores the entries the plan read exactly, and the
// writes' switch leaves no replica_reads behind.
func TestSwitchTableReplicaReads(t *testing.T) {
	ctx := testCtx(t)
	st, err := store.Dial(ctx, etcdembed.Start(t), "tablereads")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	// orders has an entry of its own, customers inherits data.
	top, err := topo.Parse([]byte(strings.Replace(moveTopology, `"tables": {"notes": {"shard_group": "main"}}`,
		`"tables": {"notes": {"shard_group": "main"}, "orders": {"shard_group": "data"}}`, 1)))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyTopology(ctx, top, store.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	a := &Actions{Store: st}
	plan, err := planMove(top, moveInput([]string{"public.orders", "public.customers"}, "archive"))
	if err != nil {
		t.Fatal(err)
	}
	on := workflows.ReadsInput{Plan: plan, On: true}
	if _, err := a.SwitchReplicaReads(ctx, on); sqlState(err) != pgerr.ObjectNotInPrerequisiteState {
		t.Fatalf("reads switch without a replica on a1: %v", err)
	}
	reg, err := st.Register(ctx, store.Record{Kind: store.KindSidecar, ID: "a1-r", ShardUID: "a1", InstanceID: "a1-r",
		Role: store.RoleReplica, GRPCAddr: "127.0.0.1:1"}, 30*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer reg.Close(ctx)
	if _, err := a.SwitchReplicaReads(ctx, on); err != nil {
		t.Fatal(err)
	}
	snap, err := st.GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, table := range []string{"orders", "customers"} {
		primary := "data{[,80)=s1 [80,)=s2} by customer_xx(xxhash(customer_id))"
		if got := snap.Topology.Resolve("shop", "public", table).Describe(); got != primary {
			t.Errorf("%s's primary placement after the reads switch: %s", table, got)
		}
		if got := snap.Topology.ReplicaReads().Resolve("shop", "public", table).Describe(); got != "archive{[,)=a1}" {
			t.Errorf("%s's replica placement after the reads switch: %s", table, got)
		}
	}
	if _, err := a.SwitchReplicaReads(ctx, workflows.ReadsInput{Plan: plan}); err != nil {
		t.Fatal(err)
	}
	if snap, err = st.GetTopology(ctx); err != nil {
		t.Fatal(err)
	}
	want, _ := json.Marshal(top)
	if got, _ := json.Marshal(snap.Topology); string(got) != string(want) {
		t.Errorf("switching reads back did not restore the topology:\n%s\nwant\n%s", got, want)
	}
	if _, err := a.SwitchReplicaReads(ctx, on); err != nil {
		t.Fatal(err)
	}
	if _, err := a.SwitchTopology(ctx, workflows.CutoverInput{Plan: plan}); err != nil {
		t.Fatal(err)
	}
	if snap, err = st.GetTopology(ctx); err != nil || snap.Topology.HasReplicaReads() ||
		snap.Topology.Resolve("shop", "public", "orders").Describe() != "archive{[,)=a1}" {
		t.Fatalf("after the writes' switch: %v", err)
	}
}
