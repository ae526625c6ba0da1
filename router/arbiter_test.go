package router_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/topo"
)

// editTopology returns base changed by edit, which gets the topology as
// its JSON document.
func editTopology(t *testing.T, base *topo.Topology, edit func(doc map[string]any)) *topo.Topology {
	t.Helper()
	raw, err := json.Marshal(base)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := json.Unmarshal(raw, &doc); err != nil {
		t.Fatal(err)
	}
	edit(doc)
	if raw, err = json.Marshal(doc); err != nil {
		t.Fatal(err)
	}
	top, err := topo.Parse(raw)
	if err != nil {
		t.Fatal(err)
	}
	return top
}

// storeTables is the tables object of store.public in a topology document.
func storeTables(doc map[string]any) map[string]any {
	return doc["databases"].(map[string]any)["store"].(map[string]any)["schemas"].(map[string]any)["public"].(map[string]any)["tables"].(map[string]any)
}

// withTableInCustomerData returns base with store.public.<table> sharded
// in the customer_data group by customer_id.
func withTableInCustomerData(t *testing.T, base *topo.Topology, table string) *topo.Topology {
	return editTopology(t, base, func(doc map[string]any) {
		storeTables(doc)[table] = map[string]any{"shard_group": "customer_data"}
	})
}

// An upsert whose arbiter lacks the shard key would find the conflicting
// row on one Postgres and update it; a shard sees only its own rows and
// would insert a second one. Such a statement is refused with 0A000 in
// both protocols, whichever way it names its arbiter (columns, ON
// CONSTRAINT, or none with DO NOTHING, when a unique index lacks the
// key), with the catalog read from the real shards; an arbiter with the
// key updates the row as Postgres does.
func TestOnConflictArbiterAcrossShards(t *testing.T) {
	ctx := context.Background()
	snap, err := cluster.Store().GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := snap.Topology
	conn := connect(t, "store")
	mustExec(t, conn, "DROP TABLE IF EXISTS arb_users",
		"CREATE TABLE arb_users (customer_id bigint PRIMARY KEY, email text UNIQUE, n int NOT NULL DEFAULT 0)")
	t.Cleanup(func() {
		applyTopology(t, base)
		mustExec(t, connect(t, "store"), "DROP TABLE IF EXISTS arb_users")
	})
	applyTopology(t, withTableInCustomerData(t, base, "arb_users"))

	var values []string
	for i := 1; i <= 20; i++ {
		values = append(values, fmt.Sprintf("(%d, 'u%d@x')", i, i))
	}
	mustExec(t, conn, "INSERT INTO arb_users (customer_id, email) VALUES "+strings.Join(values, ", "))

	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		for _, sql := range []string{
			// u1@x is customer 1's; customer 999 may live on another shard.
			"INSERT INTO arb_users (customer_id, email) VALUES (999, 'u1@x') ON CONFLICT (email) DO UPDATE SET n = arb_users.n + 1",
			"INSERT INTO arb_users (customer_id, email) VALUES (999, 'u1@x') ON CONFLICT ON CONSTRAINT arb_users_email_key DO NOTHING",
			"INSERT INTO arb_users (customer_id, email) VALUES (999, 'u1@x') ON CONFLICT DO NOTHING",
		} {
			_, err := conn.Exec(ctx, sql, mode)
			if !refusedFor(err, "each shard checks only its own rows") {
				t.Errorf("%s (%v): %v, want 0A000 for an arbiter without the shard key", sql, mode, err)
			}
		}
		if _, err := conn.Exec(ctx, "INSERT INTO arb_users (customer_id, email) VALUES (1, 'other') ON CONFLICT (customer_id) DO UPDATE SET n = arb_users.n + 1", mode); err != nil {
			t.Fatal(err)
		}
		if _, err := conn.Exec(ctx, "INSERT INTO arb_users (customer_id, email) VALUES (2, 'other') ON CONFLICT ON CONSTRAINT arb_users_pkey DO NOTHING", mode); err != nil {
			t.Fatal(err)
		}
	}
	var rows, n int
	if err := conn.QueryRow(ctx, "SELECT count(*), sum(n) FROM arb_users").Scan(&rows, &n); err != nil {
		t.Fatal(err)
	}
	if rows != 20 || n != 2 {
		t.Fatalf("%d rows with n summing to %d, want 20 rows and 2 (customer 1 updated once per protocol)", rows, n)
	}
}
