package router_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A function runs on the shard its statement goes to and reads that
// shard's rows: `SELECT fn_customers()`, counting the sharded customers,
// would go to the authoritative shard, which holds none of them, and
// answer 0. It is refused with 0A000 in both protocols (in SQL and in
// PL/pgSQL, and through another function), with the bodies read from the
// real catalog; a function over an unsharded table answers as Postgres.
func TestFunctionReadingShardedTableIsRefused(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"DELETE FROM customers WHERE customer_id BETWEEN 7720000 AND 7720099",
		"CREATE TABLE IF NOT EXISTS fn_plain (id int PRIMARY KEY)",
		"DELETE FROM fn_plain",
		"INSERT INTO fn_plain SELECT generate_series(1, 7)",
		"CREATE OR REPLACE FUNCTION fn_customers() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM customers WHERE customer_id BETWEEN 7720000 AND 7720099'",
		"CREATE OR REPLACE FUNCTION fn_outer() RETURNS bigint LANGUAGE sql AS 'SELECT fn_customers()'",
		`CREATE OR REPLACE FUNCTION fn_plp() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
  SELECT count(*) INTO n FROM customers;
  RETURN n;
END $$`,
		"CREATE OR REPLACE FUNCTION fn_plain_count() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM fn_plain'",
	)
	t.Cleanup(func() {
		mustExec(t, connect(t, "store"), "DROP FUNCTION IF EXISTS fn_outer()", "DROP FUNCTION IF EXISTS fn_customers()",
			"DROP FUNCTION IF EXISTS fn_plp()", "DROP FUNCTION IF EXISTS fn_plain_count()",
			"DELETE FROM customers WHERE customer_id BETWEEN 7720000 AND 7720099")
	})
	var values []string
	for i := range 100 {
		values = append(values, fmt.Sprintf("(%d, 'f%d')", 7720000+i, i))
	}
	mustExec(t, conn, "INSERT INTO customers VALUES "+strings.Join(values, ", "))

	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		for _, sql := range []string{"SELECT fn_customers()", "SELECT fn_outer()", "SELECT fn_plp()",
			"SELECT name FROM customers WHERE customer_id = 7720001 AND fn_customers() > 0"} {
			var n int64
			err := conn.QueryRow(ctx, sql, mode).Scan(&n)
			if !refusedFor(err, "a function that reads tables on other shards") {
				t.Errorf("%s (%v): %d, %v; want 0A000 (one Postgres answers 100)", sql, mode, n, err)
			}
		}
		var n int64
		if err := conn.QueryRow(ctx, "SELECT fn_plain_count()", mode).Scan(&n); err != nil || n != 7 {
			t.Errorf("a function over an unsharded table (%v): %d, %v; want 7", mode, n, err)
		}
	}
}

// An audit trigger on a sharded table, writing to an unsharded log,
// would write each log row into the copy of the log on the shard of the
// row written, where reads of the log (on the authoritative shard) never
// see it. Such writes are refused with 0A000, with the trigger and its
// function read from the real catalog; without the trigger they work.
func TestTriggerWritingElsewhereIsRefused(t *testing.T) {
	ctx := context.Background()
	snap, err := cluster.Store().GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := snap.Topology
	conn := connect(t, "store")
	mustExec(t, conn, "DROP TABLE IF EXISTS trig_users", "DROP TABLE IF EXISTS trig_log",
		"CREATE TABLE trig_users (customer_id bigint PRIMARY KEY, name text)",
		"CREATE TABLE trig_log (customer_id bigint)",
		`CREATE OR REPLACE FUNCTION trig_note() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
  INSERT INTO trig_log VALUES (NEW.customer_id);
  RETURN NEW;
END $$`,
		"CREATE TRIGGER trig_users_note AFTER INSERT OR UPDATE ON trig_users FOR EACH ROW EXECUTE FUNCTION trig_note()")
	t.Cleanup(func() {
		applyTopology(t, base)
		mustExec(t, connect(t, "store"), "DROP TABLE IF EXISTS trig_users", "DROP TABLE IF EXISTS trig_log",
			"DROP FUNCTION IF EXISTS trig_note()")
	})
	applyTopology(t, withTableInCustomerData(t, base, "trig_users"))

	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		for _, sql := range []string{"INSERT INTO trig_users VALUES (42, 'a')", "UPDATE trig_users SET name = 'b' WHERE customer_id = 42"} {
			_, err := conn.Exec(ctx, sql, mode)
			if !refusedFor(err, "trigger function") {
				t.Errorf("%s (%v): %v, want 0A000 for a trigger writing elsewhere", sql, mode, err)
			}
		}
	}
	// Without the refusal the log rows land in the customer shards'
	// copies of trig_log, which no read through the router sees.
	for _, shard := range []string{"shard-0", "customer-shard-1", "customer-shard-2"} {
		var logged int
		if err := direct(t, shard, "store").QueryRow(ctx, "SELECT count(*) FROM trig_log").Scan(&logged); err != nil || logged != 0 {
			t.Errorf("trig_log on %s: %d rows, %v; want 0 (nothing was written)", shard, logged, err)
		}
	}
	mustExec(t, conn, "DROP TRIGGER trig_users_note ON trig_users", "INSERT INTO trig_users VALUES (42, 'a'), (1, 'b')")
}

// A function running dynamic SQL and a DO block run where the router
// sends them (the authoritative shard) and would see or change only that
// shard's rows of a sharded table: a DO block updating customers changed
// none of them, a function counting them by EXECUTE answered 0. Both are
// refused with 0A000; a DO block over an unsharded table runs.
func TestDoBlockAndDynamicSQLAreRefused(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"DELETE FROM customers WHERE customer_id BETWEEN 7740000 AND 7740099",
		"CREATE TABLE IF NOT EXISTS do_plain (id int PRIMARY KEY)",
		"DELETE FROM do_plain",
		`CREATE OR REPLACE FUNCTION fn_dynamic() RETURNS bigint LANGUAGE plpgsql AS $$
DECLARE n bigint;
BEGIN
  EXECUTE 'SELECT count(*) FROM customers WHERE customer_id BETWEEN 7740000 AND 7740099' INTO n;
  RETURN n;
END $$`,
	)
	t.Cleanup(func() {
		mustExec(t, connect(t, "store"), "DROP FUNCTION IF EXISTS fn_dynamic()",
			"DELETE FROM customers WHERE customer_id BETWEEN 7740000 AND 7740099")
	})
	var values []string
	for i := range 100 {
		values = append(values, fmt.Sprintf("(%d, 'd%d')", 7740000+i, i))
	}
	mustExec(t, conn, "INSERT INTO customers VALUES "+strings.Join(values, ", "))

	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		var n int64
		err := conn.QueryRow(ctx, "SELECT fn_dynamic()", mode).Scan(&n)
		if !refusedFor(err, "a function that reads tables on other shards") {
			t.Errorf("SELECT fn_dynamic() (%v): %d, %v; want 0A000 (one Postgres answers 100)", mode, n, err)
		}
		_, err = conn.Exec(ctx, "DO $$BEGIN UPDATE customers SET name = 'changed' WHERE customer_id BETWEEN 7740000 AND 7740099; END$$", mode)
		if !refusedFor(err, "a DO block that reads or writes tables on other shards") {
			t.Errorf("DO updating customers (%v): %v; want 0A000", mode, err)
		}
		_, err = conn.Exec(ctx, "DO $$BEGIN EXECUTE 'DELETE FROM ' || 'do_plain'; END$$", mode)
		if !refusedFor(err, "a DO block that reads or writes tables on other shards") {
			t.Errorf("DO running dynamic SQL (%v): %v; want 0A000", mode, err)
		}
		if _, err := conn.Exec(ctx, fmt.Sprintf("DO $$BEGIN INSERT INTO do_plain VALUES (%d); END$$", len(mode.String())), mode); err != nil {
			t.Errorf("DO over an unsharded table (%v): %v", mode, err)
		}
	}
	if n := count(t, conn, "SELECT count(*) FROM customers WHERE customer_id BETWEEN 7740000 AND 7740099 AND name = 'changed'"); n != 0 {
		t.Errorf("%d customers changed by a refused DO block", n)
	}
	if n := count(t, conn, "SELECT count(*) FROM do_plain"); n != 2 {
		t.Errorf("do_plain holds %d rows, want the 2 the DO blocks inserted", n)
	}
}
