package router_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// The store's sharded tables as one Postgres would hold them: statements
// through the router must answer what they answer on a plain database
// holding every row of every shard, or be refused with 0A000 (issue #16).

// fidelityRows loads 100 customers (5 distinct names) and 80 orders
// whose note is a customer's name, spread over both customer shards, and
// removes them when the test ends.
func fidelityRows(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"CREATE TABLE IF NOT EXISTS orders (order_id bigint, customer_id bigint, total numeric, PRIMARY KEY (customer_id, order_id))",
		"ALTER TABLE orders ADD COLUMN IF NOT EXISTS note text",
		"ALTER TABLE orders ADD COLUMN IF NOT EXISTS qty int",
	)
	cleanup := func() {
		conn.Exec(ctx, "DELETE FROM orders WHERE order_id BETWEEN 330000 AND 330099")
		conn.Exec(ctx, "DELETE FROM customers WHERE customer_id BETWEEN 330000 AND 330099")
	}
	cleanup()
	t.Cleanup(cleanup)
	for i := int64(0); i < 100; i++ {
		if _, err := conn.Exec(ctx, "INSERT INTO customers (customer_id, name) VALUES ($1, $2)", 330000+i, fmt.Sprint("h2-name-", i%5)); err != nil {
			t.Fatal(err)
		}
		// Order i belongs to customer 7i mod 100 and its note is a
		// name, not its customer's; 20 customers have no order.
		if i >= 80 {
			continue
		}
		if _, err := conn.Exec(ctx, "INSERT INTO orders (order_id, customer_id, total, note, qty) VALUES ($1, $2, $3, $4, $5)",
			330000+i, 330000+(7*i)%100, i, fmt.Sprint("h2-name-", (i+1)%5), i%4); err != nil {
			t.Fatal(err)
		}
	}
}

// referenceDatabase creates a plain database on shard-0's Postgres holding
// every row of the customer shards' customers and orders, as one Postgres
// would, and returns a connection to it.
func referenceDatabase(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	const name = "store_reference"
	admin := direct(t, "shard-0", "postgres")
	mustExec(t, admin, "DROP DATABASE IF EXISTS "+name, "CREATE DATABASE "+name)
	ref := direct(t, "shard-0", name)
	t.Cleanup(func() {
		ref.Close(ctx)
		admin.Exec(ctx, "DROP DATABASE IF EXISTS "+name)
	})
	mustExec(t, ref,
		"CREATE TABLE customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"CREATE TABLE orders (order_id bigint, customer_id bigint, total numeric, note text, qty int, PRIMARY KEY (customer_id, order_id))",
	)
	for _, table := range []struct {
		name    string
		columns []string
	}{
		{"customers", []string{"customer_id", "name"}},
		{"orders", []string{"order_id", "customer_id", "total", "note", "qty"}},
	} {
		for _, shard := range []string{"customer-shard-1", "customer-shard-2"} {
			rows, err := direct(t, shard, "store").Query(ctx, "SELECT "+strings.Join(table.columns, ", ")+" FROM "+table.name)
			if err != nil {
				t.Fatal(err)
			}
			values, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
			if err != nil {
				t.Fatal(err)
			}
			if _, err := ref.CopyFrom(ctx, pgx.Identifier{table.name}, table.columns, pgx.CopyFromRows(values)); err != nil {
				t.Fatal(err)
			}
		}
	}
	return ref
}

// sortedAnswer runs sql and renders its rows, sorted (the order of rows is not
// what these tests compare), or returns the error.
func sortedAnswer(conn *pgx.Conn, sql string) ([]string, error) {
	rows, err := conn.Query(context.Background(), sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		return nil, err
	}
	out, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
		v, err := r.Values()
		return fmt.Sprint(v), err
	})
	slices.Sort(out)
	return out, err
}

// fidelityCase is a statement and whether the router must refuse it
// (0A000) or answer it as the reference database does.
type fidelityCase struct {
	sql     string
	refused bool
}

func checkFidelity(t *testing.T, conn, ref *pgx.Conn, cases []fidelityCase) {
	t.Helper()
	for _, c := range cases {
		want, err := sortedAnswer(ref, c.sql)
		if err != nil {
			t.Fatalf("reference: %s: %v", c.sql, err)
		}
		var got []string
		if c.refused {
			// Refused by the shards and the engine: with gathering
			// (gather.go) the answer may be Postgres's, as many rows
			// (TestDifferential compares them); without, 0A000.
			got, err = sortedAnswer(conn, c.sql)
			if err != nil && sqlstate(err) != "0A000" || err == nil && len(got) != len(want) {
				t.Errorf("%s gathered: %d rows (err %v), want 0A000 or %d rows", c.sql, len(got), err, len(want))
			}
			mustExec(t, conn, "SET tessera.gather = off")
		}
		got, err = sortedAnswer(conn, c.sql)
		if c.refused {
			mustExec(t, conn, "RESET tessera.gather")
		}
		switch {
		case c.refused && sqlstate(err) != "0A000":
			t.Errorf("%s\n got %d rows %v (err %v)\nwant 0A000 (Postgres answers %d rows %v)", c.sql, len(got), got, err, len(want), want)
		case !c.refused && err != nil:
			t.Errorf("%s: %v, want %d rows %v", c.sql, err, len(want), want)
		case !c.refused && !slices.Equal(got, want):
			t.Errorf("%s\n got %d rows %v\nwant %d rows %v", c.sql, len(got), got, len(want), want)
		}
	}
}

// A clause that needs the rows of every shard together under a LIMIT:
// DISTINCT, GROUP BY, ORDER BY and OFFSET over columns the router's
// engine reads are answered as Postgres answers them (the shards run the
// statement without its LIMIT, or with LIMIT + OFFSET), HAVING over an
// aggregate not shown too (a hidden column); DISTINCT of an expression,
// windows and WITH TIES are refused across shards and answered on one
// shard.
func TestCombiningClausesUnderLimit(t *testing.T) {
	conn := connect(t, "store")
	fidelityRows(t, conn)
	ref := referenceDatabase(t)
	const mine = " WHERE customer_id BETWEEN 330000 AND 330099"
	checkFidelity(t, conn, ref, []fidelityCase{
		{"SELECT DISTINCT name FROM customers LIMIT 10", false},
		{"SELECT name FROM customers GROUP BY name LIMIT 10", false},
		{"SELECT DISTINCT name FROM customers" + mine + " LIMIT 10", false},
		{"SELECT name FROM customers" + mine + " GROUP BY name LIMIT 10", false},
		{"SELECT DISTINCT customer_id % 7 AS k FROM customers" + mine + " ORDER BY k LIMIT 5", true},
		{"SELECT DISTINCT customer_id FROM customers" + mine + " ORDER BY customer_id LIMIT 5", false},
		{"SELECT DISTINCT qty FROM orders WHERE order_id BETWEEN 330000 AND 330099 ORDER BY qty LIMIT 3", false},
		{"SELECT name FROM customers" + mine + " GROUP BY name HAVING count(*) > 1 LIMIT 10", false},
		{"SELECT customer_id, count(*) OVER () FROM customers" + mine + " LIMIT 3", true},
		{"SELECT customer_id FROM customers" + mine + " ORDER BY customer_id OFFSET 95", false},
		{"SELECT customer_id FROM customers" + mine + " ORDER BY customer_id FETCH FIRST 3 ROWS WITH TIES", true},
		// What the merges can do is still answered.
		{"SELECT customer_id FROM customers" + mine + " ORDER BY customer_id LIMIT 5", false},
		{"SELECT count(*) FROM customers" + mine, false},
		{"SELECT DISTINCT name FROM customers WHERE customer_id = 330042 LIMIT 10", false},
		{"SELECT name, count(*) FROM customers WHERE customer_id IN (330042, 330042) GROUP BY name LIMIT 10", false},
	})
}

// A statement over several sharded tables runs on one shard only if every
// table's rows are proven to be there, and on several only if its tables
// are joined by equal shard keys (colocated); otherwise rows pairing
// across shards would be missed, and it is refused.
func TestJoinsAcrossShards(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	fidelityRows(t, conn)
	var spread int
	for _, shard := range []string{"customer-shard-1", "customer-shard-2"} {
		var n int
		direct(t, shard, "store").QueryRow(ctx, "SELECT count(*) FROM orders WHERE order_id BETWEEN 330000 AND 330099").Scan(&n)
		if n > 0 {
			spread++
		}
	}
	if spread != 2 {
		t.Fatal("the test's orders are not on both shards")
	}
	ref := referenceDatabase(t)
	const mine = "c.customer_id BETWEEN 330000 AND 330099"
	checkFidelity(t, conn, ref, []fidelityCase{
		// A key predicate on one table, the other joined on something
		// else: its rows on the other shard would be missed.
		{"SELECT count(*) FROM customers c JOIN orders o ON o.note = c.name WHERE c.customer_id = 42", true},
		{"SELECT count(*) FROM customers c JOIN orders o ON o.note = c.name WHERE c.customer_id = 330042", true},
		{"SELECT count(*) FROM customers c LEFT JOIN orders o ON o.note = c.name WHERE c.customer_id = 330042", true},
		{"SELECT count(*) FROM customers c CROSS JOIN orders o WHERE c.customer_id = 330042 AND o.order_id BETWEEN 330000 AND 330099", true},
		{"SELECT count(*) FROM customers WHERE customer_id = 330042 AND name IN (SELECT note FROM orders WHERE order_id BETWEEN 330000 AND 330099)", true},
		{"SELECT count(*) FROM customers c WHERE c.customer_id = 330042 AND EXISTS (SELECT 1 FROM orders o WHERE o.note = c.name)", true},
		{"SELECT c.customer_id, (SELECT count(*) FROM orders o WHERE o.note = c.name) FROM customers c WHERE c.customer_id = 330042", true},
		{"SELECT count(*) FROM customers c WHERE " + mine + " AND EXISTS (SELECT 1 FROM orders o WHERE o.note = c.name)", true},
		{"SELECT EXISTS (SELECT 1 FROM customers WHERE name = 'h2-name-1')", true},
		// Joined by the shard key: colocated, on one shard with a key
		// predicate, on every shard without.
		{"SELECT c.name, o.order_id, o.total FROM customers c JOIN orders o ON o.customer_id = c.customer_id WHERE c.customer_id = 330007", false},
		{"SELECT c.name, o.order_id FROM customers c JOIN orders o USING (customer_id) WHERE customer_id IN (330007, 330014, 330021)", false},
		{"SELECT c.customer_id, o.order_id FROM customers c JOIN orders o USING (customer_id) WHERE " + mine, false},
		{"SELECT c.customer_id, o.order_id FROM customers c LEFT JOIN orders o ON o.customer_id = c.customer_id WHERE " + mine, false},
		{"SELECT count(*) FROM customers c JOIN orders o ON o.customer_id = c.customer_id WHERE " + mine, false},
		{"SELECT count(*) FROM customers c WHERE " + mine + " AND EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id)", false},
		{"SELECT count(*) FROM customers c WHERE " + mine + " AND NOT EXISTS (SELECT 1 FROM orders o WHERE o.customer_id = c.customer_id)", false},
		{"SELECT customer_id FROM customers c WHERE " + mine + " AND customer_id IN (SELECT customer_id FROM orders WHERE total > 50)", false},
		{"SELECT c.customer_id, (SELECT sum(total) FROM orders o WHERE o.customer_id = c.customer_id) FROM customers c WHERE c.customer_id = 330007", false},
		// Each table restricted by its own key predicate, to one shard.
		{"SELECT c.name, o.note FROM customers c, orders o WHERE c.customer_id = 330007 AND o.customer_id = 330007", false},
		{"SELECT count(*) FROM customers WHERE customer_id = 330007 AND name IN (SELECT note FROM orders WHERE customer_id = 330007)", false},
	})

	// A colocated join with a key predicate still runs on one shard.
	rows, err := conn.Query(ctx, "EXPLAIN (TESSERA) SELECT * FROM customers c JOIN orders o ON o.customer_id = c.customer_id WHERE c.customer_id = 330007", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	shards := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "Shard ") {
			shards++
		}
	}
	if !slices.Contains(lines, "Route: shard (group customer_data)") || shards != 1 {
		t.Errorf("colocated join with a key predicate:\n%s", strings.Join(lines, "\n"))
	}

	// A write whose subquery reads another table not by the shard key is
	// refused, and changes nothing.
	_, err = conn.Exec(ctx, "UPDATE customers SET name = 'changed' WHERE name IN (SELECT note FROM orders WHERE order_id = 330001)")
	if sqlstate(err) != "0A000" {
		t.Errorf("UPDATE with a subquery not on the shard key: %v, want 0A000", err)
	}
	var changed int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM customers WHERE name = 'changed'").Scan(&changed); err != nil || changed != 0 {
		t.Errorf("%d rows changed, %v", changed, err)
	}
}

// A user-defined aggregate called by name alone looks like a plain
// function to the parser: the router asks the catalog, and refuses it
// across shards rather than answer one row per shard. FILTER, OVER,
// WITHIN GROUP and GROUPING SETS are each checked against one Postgres.
func TestUserDefinedAggregatesAcrossShards(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	fidelityRows(t, conn)
	ref := referenceDatabase(t)
	const create = "CREATE AGGREGATE h4_sum (int) (sfunc = int4pl, stype = int, initcond = '0')"
	conn.Exec(ctx, "DROP AGGREGATE IF EXISTS h4_sum (int)")
	mustExec(t, conn, create)
	t.Cleanup(func() { conn.Exec(ctx, "DROP AGGREGATE IF EXISTS h4_sum (int)") })
	mustExec(t, ref, create)
	const mine = " FROM orders WHERE order_id BETWEEN 330000 AND 330099"
	checkFidelity(t, conn, ref, []fidelityCase{
		{"SELECT h4_sum(qty)" + mine, true},
		{"SELECT public.h4_sum(qty)" + mine, true},
		{"SELECT h4_sum(qty) + 1" + mine, true},
		{"SELECT h4_sum(qty) FILTER (WHERE qty > 1)" + mine, true},
		{"SELECT h4_sum(qty) OVER ()" + mine, true},
		{"SELECT count(*)" + mine + " AND qty < (SELECT h4_sum(qty)" + mine + ")", true},
		{"SELECT percentile_cont(0.5) WITHIN GROUP (ORDER BY qty)" + mine, true},
		{"SELECT mode() WITHIN GROUP (ORDER BY qty)" + mine, true},
		{"SELECT qty, count(*)" + mine + " GROUP BY ROLLUP (qty)", true},
		{"SELECT qty, count(*)" + mine + " GROUP BY CUBE (qty)", true},
		{"SELECT qty, count(*)" + mine + " GROUP BY GROUPING SETS ((qty), ())", true},
		{"SELECT sum(qty) FILTER (WHERE qty > 1)" + mine, false},
		// Counts and sums, filtered or not, are summed exactly.
		{"SELECT count(*) FILTER (WHERE qty > 1), count(note)" + mine, false},
		// On one shard, Postgres computes anything.
		{"SELECT h4_sum(qty), percentile_cont(0.5) WITHIN GROUP (ORDER BY qty) FROM orders WHERE customer_id = 330007", false},
	})

	// DDL earlier in the query string, or in the open transaction, is
	// not in the catalog snapshot yet: the call is refused all the same.
	mustExec(t, conn, "DROP AGGREGATE h4_sum (int)")
	_, err := conn.Exec(ctx, create+"; SELECT h4_sum(qty)"+mine, pgx.QueryExecModeSimpleProtocol)
	if sqlstate(err) != "0A000" {
		t.Errorf("CREATE AGGREGATE and its call in one string: %v, want 0A000", err)
	}
	mustExec(t, conn, "DROP AGGREGATE IF EXISTS h4_sum (int)")
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, create); err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "SELECT h4_sum(qty)"+mine)
	if sqlstate(err) != "0A000" {
		t.Errorf("in the transaction that created it: %v, want 0A000", err)
	}
	tx.Rollback(ctx)
	// Once the transaction commits, the snapshot is taken again.
	tx, err = conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT count(*)"+mine); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, create); err != nil {
		t.Fatal(err)
	}
	// Another session plans the call while the aggregate is not
	// committed: the catalog has no h4_sum yet, and Postgres says so.
	other := connect(t, "store")
	if _, err := other.Exec(ctx, "SELECT h4_sum(qty)"+mine); sqlstate(err) != "42883" {
		t.Errorf("before the aggregate is committed: %v, want 42883", err)
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	_, err = conn.Exec(ctx, "SELECT h4_sum(qty)"+mine)
	if sqlstate(err) != "0A000" {
		t.Errorf("after the transaction that created it committed: %v, want 0A000", err)
	}
}
