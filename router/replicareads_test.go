package router_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/topo"
)

// withReplicaProbe returns base with table store.public.replica_probe in
// the customer_data group and, when swapped, that group's replica reads
// on the other shard of each range, as a reads-first SwitchTraffic of a
// reshard onto them would leave it.
func withReplicaProbe(t *testing.T, base *topo.Topology, swapped bool) *topo.Topology {
	return withReplicaProbeEntry(t, base, swapped, nil)
}

// withReplicaProbeEntry is withReplicaProbe with, when replicaReads is
// set, that replica_reads binding on the probe table, as a MoveTables'
// reads-first SwitchTraffic leaves it.
func withReplicaProbeEntry(t *testing.T, base *topo.Topology, swapped bool, replicaReads map[string]any) *topo.Topology {
	t.Helper()
	return editTopology(t, base, func(doc map[string]any) {
		tables := storeTables(doc)
		tables["replica_probe"] = map[string]any{"shard_group": "customer_data"}
		if replicaReads != nil {
			tables["replica_probe"] = map[string]any{"shard_group": "customer_data", "replica_reads": replicaReads}
		}
		if swapped {
			for _, g := range doc["shard_groups"].([]any) {
				if g := g.(map[string]any); g["uid"] == "customer_data" {
					g["replica_key_ranges"] = []any{map[string]any{"shard_uid": "customer-shard-2", "end": "80"},
						map[string]any{"shard_uid": "customer-shard-1", "start": "80"}}
				}
			}
		}
	})
}

// TestReplicaReadsFollowReplicaKeyRanges: with replica_key_ranges set,
// replica sessions' statements on the group's tables route by them while
// primary sessions' keep the key ranges; clearing them puts replica reads
// back. Each row lives on the shard its key range names, so a replica
// read routed by the swapped ranges finds none of the rows it asks for by
// key.
func TestReplicaReadsFollowReplicaKeyRanges(t *testing.T) {
	ctx := context.Background()
	snap, err := cluster.Store().GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := snap.Topology
	t.Cleanup(func() { applyTopology(t, base) })
	applyTopology(t, withReplicaProbe(t, base, false))
	primary := connect(t, "store")
	mustExec(t, primary, "DROP TABLE IF EXISTS replica_probe", "CREATE TABLE replica_probe (customer_id bigint PRIMARY KEY)")
	t.Cleanup(func() { primary.Exec(context.Background(), "DROP TABLE IF EXISTS replica_probe") })
	const rows = 20
	for id := 1; id <= rows; id++ {
		if _, err := primary.Exec(ctx, "INSERT INTO replica_probe VALUES ($1)", id); err != nil {
			t.Fatal(err)
		}
	}
	cfg, _ := pgx.ParseConfig(dsn("store"))
	cfg.RuntimeParams["options"] = "-c tessera.target=replica"
	replica, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Close(ctx)
	// The replicas replay the rows: every one of them is found by key.
	deadline := time.Now().Add(20 * time.Second)
	for {
		var n int
		err := replica.QueryRow(ctx, "SELECT count(*) FROM replica_probe", pgx.QueryExecModeSimpleProtocol).Scan(&n)
		if err == nil && n == rows {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the replicas have %d of %d rows: %v", n, rows, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if found := byKey(t, replica, rows, pgx.QueryExecModeSimpleProtocol); found != rows {
		t.Fatalf("replica sessions find %d of %d rows by key before any switch", found, rows)
	}
	// A statement prepared before the switch is planned again after it.
	prepared, err := replica.Prepare(ctx, "probe", "SELECT count(*) FROM replica_probe WHERE customer_id = $1")
	if err != nil {
		t.Fatal(err)
	}

	applyTopology(t, withReplicaProbe(t, base, true))
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		if n := byKey(t, replica, rows, mode); n != 0 {
			t.Errorf("mode %v: a replica session found %d rows by key on the other shards: not routed by replica_key_ranges", mode, n)
		}
		if n := byKey(t, primary, rows, mode); n != rows {
			t.Errorf("mode %v: a primary session found %d of %d rows by key: primary reads must keep the key ranges", mode, n, rows)
		}
	}
	var n int
	if err := replica.QueryRow(ctx, prepared.Name, 1).Scan(&n); err != nil || n != 0 {
		t.Errorf("statement prepared before the switch: %d rows, %v (want 0: planned again by replica_key_ranges)", n, err)
	}
	// A scatter read covers every shard either way.
	if err := replica.QueryRow(ctx, "SELECT count(*) FROM replica_probe").Scan(&n); err != nil || n != rows {
		t.Errorf("replica scatter count %d, %v", n, err)
	}
	// The same session back on primaries plans by the key ranges again.
	mustExec(t, replica, "SET tessera.target = 'primary'")
	if n := byKey(t, replica, rows, pgx.QueryExecModeCacheStatement); n != rows {
		t.Errorf("after SET tessera.target = 'primary': %d of %d rows by key", n, rows)
	}
	if err := replica.QueryRow(ctx, prepared.Name, 1).Scan(&n); err != nil || n != 1 {
		t.Errorf("prepared statement after SET tessera.target = 'primary': %d rows, %v", n, err)
	}
	mustExec(t, replica, "SET tessera.target = 'replica'")

	applyTopology(t, withReplicaProbe(t, base, false))
	if n := byKey(t, replica, rows, pgx.QueryExecModeCacheStatement); n != rows {
		t.Errorf("replica reads put back: %d of %d rows by key", n, rows)
	}

	// A table's own replica_reads binding: its replica reads go to the
	// authoritative group, whose shard has the table empty.
	applyTopology(t, withReplicaProbeEntry(t, base, false, map[string]any{"shard_group": "main"}))
	if err := replica.QueryRow(ctx, "SELECT count(*) FROM replica_probe").Scan(&n); err != nil || n != 0 {
		t.Errorf("replica count under the table's replica_reads: %d, %v (want 0: read on shard-0)", n, err)
	}
	if n := byKey(t, primary, rows, pgx.QueryExecModeCacheStatement); n != rows {
		t.Errorf("primary reads under the table's replica_reads: %d of %d rows by key", n, rows)
	}
}

// byKey counts the rows 1..rows that conn finds by their key.
func byKey(t *testing.T, conn *pgx.Conn, rows int, mode pgx.QueryExecMode) int {
	t.Helper()
	found := 0
	for id := 1; id <= rows; id++ {
		var n int
		if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM replica_probe WHERE customer_id = $1", mode, id).Scan(&n); err != nil {
			t.Fatalf("id %d: %v", id, err)
		}
		found += n
	}
	return found
}
