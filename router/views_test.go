package router_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// A view over a sharded table exists on every shard and reads only that
// shard's rows: answered from the shard its name is placed on, it would
// miss the others' rows. Through the router one cannot be created, and
// one made directly on the shards (as before a table was resharded) is
// refused with 0A000 in both protocols, for reads and writes, once the
// router has seen a schema change. A view over an unsharded table
// answers as before, and the refused view can still be dropped.
func TestViewOverShardedTableIsRefused(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"DROP VIEW IF EXISTS views_all_customers",
		"DROP VIEW IF EXISTS views_customers",
		"DROP VIEW IF EXISTS views_plain_v",
		"DELETE FROM customers WHERE customer_id BETWEEN 7710000 AND 7710099",
		"CREATE TABLE IF NOT EXISTS views_plain (id int PRIMARY KEY)",
		"DELETE FROM views_plain",
		"INSERT INTO views_plain SELECT generate_series(1, 5)",
	)
	var values []string
	for i := range 100 {
		values = append(values, fmt.Sprintf("(%d, 'v%d')", 7710000+i, i))
	}
	mustExec(t, conn, "INSERT INTO customers VALUES "+strings.Join(values, ", "))

	refused := func(sql string, mode pgx.QueryExecMode) {
		t.Helper()
		rows, err := conn.Query(ctx, sql, mode)
		if err == nil {
			for rows.Next() {
			}
			rows.Close()
			err = rows.Err()
		}
		if !refusedFor(err, "view over tables on other shards") {
			t.Errorf("%s (%v): %v, want 0A000 for a view over tables on other shards", sql, mode, err)
		}
	}
	refused("CREATE VIEW views_customers AS SELECT customer_id, name FROM customers", pgx.QueryExecModeSimpleProtocol)

	// Made directly on every shard, as a view made before customers was
	// sharded would be; on the customer shards it reads their rows only.
	for _, shard := range []string{"shard-0", "customer-shard-1", "customer-shard-2"} {
		d := direct(t, shard, "store")
		if _, err := d.Exec(ctx, "CREATE VIEW views_customers AS SELECT customer_id, name FROM customers"); err != nil {
			t.Fatal(shard, err)
		}
		if _, err := d.Exec(ctx, "CREATE VIEW views_all_customers AS SELECT * FROM views_customers"); err != nil {
			t.Fatal(shard, err)
		}
	}
	// DDL through the router makes it read the catalog again.
	mustExec(t, conn, "CREATE VIEW views_plain_v AS SELECT id FROM views_plain")

	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		refused("SELECT count(*) FROM views_customers WHERE customer_id BETWEEN 7710000 AND 7710099", mode)
		refused("SELECT count(*) FROM views_all_customers", mode)
		refused("UPDATE views_customers SET name = 'w' WHERE customer_id = 7710001", mode)
		var n int
		if err := conn.QueryRow(ctx, "SELECT count(*) FROM views_plain_v", mode).Scan(&n); err != nil || n != 5 {
			t.Errorf("a view over an unsharded table (%v): %d, %v; want 5", mode, n, err)
		}
	}
	// What one Postgres holding all the rows answers is 100; the shards'
	// views together hold them (the refusal is not hiding a loss).
	total := 0
	for _, shard := range []string{"customer-shard-1", "customer-shard-2"} {
		var n int
		if err := direct(t, shard, "store").QueryRow(ctx,
			"SELECT count(*) FROM views_customers WHERE customer_id BETWEEN 7710000 AND 7710099").Scan(&n); err != nil {
			t.Fatal(err)
		}
		total += n
	}
	if total != 100 {
		t.Fatalf("the shards' views hold %d rows, want 100", total)
	}
	mustExec(t, conn, "DROP VIEW views_all_customers", "DROP VIEW views_customers", "DROP VIEW views_plain_v",
		"DELETE FROM customers WHERE customer_id BETWEEN 7710000 AND 7710099")
}

// A rule of a sharded table (CREATE RULE ... DO ALSO INSERT INTO an
// unsharded log) runs on the shard of the row written, into that shard's
// copy of the log: such writes are refused with 0A000, the rule read from
// the real catalog, and no shard's log gets a row.
func TestRuleWritingElsewhereIsRefused(t *testing.T) {
	ctx := context.Background()
	snap, err := cluster.Store().GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := snap.Topology
	conn := connect(t, "store")
	mustExec(t, conn, "DROP TABLE IF EXISTS rule_users", "DROP TABLE IF EXISTS rule_log",
		"CREATE TABLE rule_users (customer_id bigint PRIMARY KEY, name text)",
		"CREATE TABLE rule_log (customer_id bigint)",
		"CREATE RULE rule_users_log AS ON INSERT TO rule_users DO ALSO INSERT INTO rule_log VALUES (NEW.customer_id)")
	t.Cleanup(func() {
		applyTopology(t, base)
		mustExec(t, connect(t, "store"), "DROP TABLE IF EXISTS rule_users", "DROP TABLE IF EXISTS rule_log")
	})
	applyTopology(t, withTableInCustomerData(t, base, "rule_users"))
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		_, err := conn.Exec(ctx, "INSERT INTO rule_users VALUES (42, 'a')", mode)
		if !refusedFor(err, "whose rule names") {
			t.Errorf("%v: %v, want 0A000 for a rule writing elsewhere", mode, err)
		}
	}
	for _, shard := range []string{"shard-0", "customer-shard-1", "customer-shard-2"} {
		var logged int
		if err := direct(t, shard, "store").QueryRow(ctx, "SELECT count(*) FROM rule_log").Scan(&logged); err != nil || logged != 0 {
			t.Errorf("rule_log on %s: %d rows, %v; want 0", shard, logged, err)
		}
	}
}

// refusedFor reports an error with SQLSTATE 0A000 whose message holds
// reason.
func refusedFor(err error, reason string) bool {
	var pe *pgconn.PgError
	return errors.As(err, &pe) && pe.Code == "0A000" && strings.Contains(pe.Message, reason)
}
