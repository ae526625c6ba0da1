package router_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// INSERT ... SELECT from orders into customers, both sharded by
// customer_id with the same function, runs on the shards: every row
// lands on the shard its key routes to, the command tag counts them all,
// and a unique violation on one shard leaves nothing inserted on any
// (one transaction across the shards), in both protocols.
func TestInsertSelectColocated(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"CREATE TABLE IF NOT EXISTS orders (order_id bigint, customer_id bigint, total numeric, PRIMARY KEY (customer_id, order_id))",
		"DELETE FROM customers WHERE customer_id BETWEEN 7730000 AND 7730099",
		"DELETE FROM orders WHERE customer_id BETWEEN 7730000 AND 7730099")
	t.Cleanup(func() {
		mustExec(t, connect(t, "store"), "DELETE FROM customers WHERE customer_id BETWEEN 7730000 AND 7730099",
			"DELETE FROM orders WHERE customer_id BETWEEN 7730000 AND 7730099")
	})
	var values []string
	for i := range 50 {
		values = append(values, fmt.Sprintf("(1, %d, %d)", 7730000+i, i))
		values = append(values, fmt.Sprintf("(2, %d, %d)", 7730000+i, i+100))
	}
	mustExec(t, conn, "INSERT INTO orders (order_id, customer_id, total) VALUES "+strings.Join(values, ", "))

	const copyIn = "INSERT INTO customers (customer_id, name) SELECT customer_id, 'from order ' || order_id FROM orders WHERE customer_id BETWEEN 7730000 AND 7730049 AND order_id = 1"
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		mustExec(t, conn, "DELETE FROM customers WHERE customer_id BETWEEN 7730000 AND 7730099")
		// One customer exists already, on one shard: the whole INSERT
		// fails, and the other shard keeps none of its rows.
		mustExec(t, conn, "INSERT INTO customers VALUES (7730007, 'already')")
		if _, err := conn.Exec(ctx, copyIn, mode); sqlstate(err) != "23505" {
			t.Fatalf("%v: a duplicate key on one shard: %v, want 23505", mode, err)
		}
		if n := countRows(t, conn, "SELECT count(*) FROM customers WHERE customer_id BETWEEN 7730000 AND 7730099"); n != 1 {
			t.Fatalf("%v: %d customers after the failed INSERT ... SELECT, want 1", mode, n)
		}
		mustExec(t, conn, "DELETE FROM customers WHERE customer_id = 7730007")
		tag, err := conn.Exec(ctx, copyIn, mode)
		if err != nil || tag.String() != "INSERT 0 50" {
			t.Fatalf("%v: %v, %v; want INSERT 0 50", mode, tag, err)
		}
	}
	// Each row on the shard its key routes to, none twice.
	snap, err := cluster.Store().GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	placement := snap.Topology.Resolve("store", "public", "customers")
	seen := map[int64]bool{}
	for _, shard := range []string{"shard-0", "customer-shard-1", "customer-shard-2"} {
		rows, err := direct(t, shard, "store").Query(ctx, "SELECT customer_id, name FROM customers WHERE customer_id BETWEEN 7730000 AND 7730099")
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id int64
			var name string
			if err := rows.Scan(&id, &name); err != nil {
				t.Fatal(err)
			}
			if _, want, err := placement.RouteInt(id); err != nil || want != shard || seen[id] || name != "from order 1" {
				t.Errorf("customer %d (%q) on %s, routed to %s (%v), seen before %v", id, name, shard, want, err, seen[id])
			}
			seen[id] = true
		}
		rows.Close()
	}
	if len(seen) != 50 {
		t.Fatalf("%d customers stored, want 50", len(seen))
	}
}

func countRows(t *testing.T, conn *pgx.Conn, sql string) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(context.Background(), sql).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}
