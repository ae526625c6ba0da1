package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The acceptance run's checks of the bulk rows, column types, the
// table's dependents after a swap, and what a migration leaves.

// checkBulk: the bulk rows are all there, unchanged, through the router
// and on their shards.
func (rc *reshardCluster) checkBulk(t *testing.T, ctx context.Context, table string, perShard map[string]int64) {
	t.Helper()
	const intact = "SELECT count(*) FROM %s WHERE id <= $1 AND name = 'bulk-' || id AND note IS NULL AND payload = 'payload-' || id || '-' || repeat('x', 40)"
	var total int64
	for s, want := range perShard {
		var got int64
		if err := rc.direct(t, ctx, s).QueryRow(ctx, fmt.Sprintf(intact, table), rc.bulkKeys).Scan(&got); err != nil || got != want {
			t.Errorf("%s on %s: %d bulk rows intact (%v), want %d", table, s, got, err, want)
		}
		total += want
	}
	var got int64
	if err := rc.routerConn(t, ctx).QueryRow(ctx, fmt.Sprintf(intact, table), simple, rc.bulkKeys).Scan(&got); err != nil || got != total {
		t.Errorf("%s through the router: %d bulk rows intact (%v), want %d", table, got, err, total)
	}
}

// checkColumnType: every shard that holds table has column as typ.
func (rc *reshardCluster) checkColumnType(t *testing.T, ctx context.Context, table, column, typ string) {
	t.Helper()
	for _, s := range append([]string{"shard-0"}, rc.shards...) {
		var got string
		err := rc.direct(t, ctx, s).QueryRow(ctx, `SELECT format_type(atttypid, atttypmod) FROM pg_attribute
			WHERE attrelid = $1::regclass AND attname = $2`, table, column).Scan(&got)
		if err != nil || got != typ {
			t.Errorf("%s: %s.%s is %q (%v), want %s", s, table, column, got, err, typ)
		}
	}
}

// simple makes the test's own statements through the router use the
// simple protocol. In the extended protocol a statement prepared after a
// column's type changed can be described to the client by a pooled
// backend that prepared it before the change (the old parameter types)
// and bound on one that prepared it after: seen as 22P03 "incorrect
// binary data format for int8: 4 bytes" (docs/operations.md, OnlineDDL).
const simple = pgx.QueryExecModeSimpleProtocol

// checkDependents: after the swap, through the router, the foreign key
// to orders refuses a note of a missing order and takes one of a present
// order, the view reads the table in place, and the serial's sequence,
// owned by the table in place, goes on from where it was on its shard.
func (rc *reshardCluster) checkDependents(t *testing.T, ctx context.Context, conn *pgx.Conn) {
	t.Helper()
	missing := rc.bulkKeys + 2 // no order has it: above the bulk, below the writers' keys
	_, err := conn.Exec(ctx, "INSERT INTO order_notes (id, note) VALUES ($1, 'orphan')", simple, missing)
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "23503" {
		t.Errorf("a note of a missing order after the swap: %v, want SQLSTATE 23503", err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO order_notes (id, note) VALUES (31, 'after the swap')", simple); err != nil {
		t.Errorf("a note of order 31 after the swap: %v", err)
	}
	var name string
	if err := conn.QueryRow(ctx, "SELECT name FROM named_orders WHERE id = 17", simple).Scan(&name); err != nil || name != "bulk-17" {
		t.Errorf("the view through the router: %q, %v; want bulk-17", name, err)
	}
	// A row of its own (above the bulk, below the writers' keys) takes
	// its seq from the sequence; it is deleted again.
	key := rc.bulkKeys + 1
	_, shard, err := rc.top().Resolve("shop", "public", "orders").RouteInt(key)
	if err != nil {
		t.Fatal(err)
	}
	var before, seq int64
	if err := rc.direct(t, ctx, shard).QueryRow(ctx, "SELECT max(seq) FROM orders").Scan(&before); err != nil {
		t.Fatal(err)
	}
	// On the shard itself: through the router, seq comes from the
	// authoritative shard's copy of the sequence, which the router serves
	// for tables beyond it (docs/router.md, Sequences).
	onShard := rc.direct(t, ctx, shard)
	if err := onShard.QueryRow(ctx, "INSERT INTO orders (id, name) VALUES ($1, 'seq') RETURNING seq", key).Scan(&seq); err != nil || seq <= before {
		t.Errorf("an insert after the swap took seq %d (%v), want more than %d, the largest before it on %s", seq, err, before, shard)
	}
	if _, err := onShard.Exec(ctx, "DELETE FROM orders WHERE id = $1", key); err != nil {
		t.Fatal(err)
	}
	for _, s := range append([]string{"shard-0"}, rc.shards...) {
		var owned *string
		var valid bool
		err := rc.direct(t, ctx, s).QueryRow(ctx, `SELECT pg_get_serial_sequence('orders', 'seq'),
			(SELECT convalidated FROM pg_constraint WHERE conrelid = 'order_notes'::regclass AND confrelid = 'orders'::regclass)`).Scan(&owned, &valid)
		if err != nil || owned == nil || *owned != "public.orders_seq_seq" || !valid {
			t.Errorf("%s: the serial's sequence %v, the foreign key valid %v (%v): want public.orders_seq_seq, valid", s, owned, valid, err)
		}
	}
}

// checkMigrationLeftNothing: no slot, publication, origin, shadow or old
// table of a migration on any shard.
func (rc *reshardCluster) checkMigrationLeftNothing(t *testing.T, ctx context.Context) {
	t.Helper()
	for _, s := range append([]string{"shard-0"}, rc.shards...) {
		var left int64
		err := rc.direct(t, ctx, s).QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots) + (SELECT count(*) FROM pg_publication)
			+ (SELECT count(*) FROM pg_replication_origin) + (SELECT count(*) FROM pg_class WHERE relname LIKE '\_tessera\_shadow\_%' OR relname LIKE '\_tessera\_old\_%')`).Scan(&left)
		if err != nil || left != 0 {
			t.Errorf("%s: %d slots, publications, origins or tables of a migration left (%v)", s, left, err)
		}
	}
}

// loadAvg is the machine's load, as /proc/loadavg says.
func loadAvg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	return strings.TrimSpace(string(b))
}
