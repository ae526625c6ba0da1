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

// fidelityRows loads 100 customers (5 distinct names) and 100 orders
// whose note is a customer's name, spread over both customer shards, and
// removes them when the test ends.
func fidelityRows(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"CREATE TABLE IF NOT EXISTS orders (order_id bigint, customer_id bigint, total numeric, PRIMARY KEY (customer_id, order_id))",
		"ALTER TABLE orders ADD COLUMN IF NOT EXISTS note text",
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
		// Order i belongs to customer (7i mod 100) and names customer
		// i's name: its note is not its customer's.
		if _, err := conn.Exec(ctx, "INSERT INTO orders (order_id, customer_id, total, note) VALUES ($1, $2, $3, $4)",
			330000+i, 330000+(7*i)%100, i, fmt.Sprint("h2-name-", (i+1)%5)); err != nil {
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
		"CREATE TABLE orders (order_id bigint, customer_id bigint, total numeric, note text, PRIMARY KEY (customer_id, order_id))",
	)
	for _, table := range []struct {
		name    string
		columns []string
	}{
		{"customers", []string{"customer_id", "name"}},
		{"orders", []string{"order_id", "customer_id", "total", "note"}},
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

// answer runs sql and renders its rows, sorted (the order of rows is not
// what these tests compare), or returns the error.
func answer(conn *pgx.Conn, sql string) ([]string, error) {
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
		want, err := answer(ref, c.sql)
		if err != nil {
			t.Fatalf("reference: %s: %v", c.sql, err)
		}
		got, err := answer(conn, c.sql)
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

// A clause that needs the rows of every shard together (DISTINCT, GROUP
// BY, HAVING, windows, OFFSET) is refused across shards even under a
// LIMIT, which the router can merge alone; on one shard it is answered.
func TestCombiningClausesUnderLimit(t *testing.T) {
	conn := connect(t, "store")
	fidelityRows(t, conn)
	ref := referenceDatabase(t)
	const mine = " WHERE customer_id BETWEEN 330000 AND 330099"
	checkFidelity(t, conn, ref, []fidelityCase{
		{"SELECT DISTINCT name FROM customers LIMIT 10", true},
		{"SELECT name FROM customers GROUP BY name LIMIT 10", true},
		{"SELECT DISTINCT name FROM customers" + mine + " LIMIT 10", true},
		{"SELECT name FROM customers" + mine + " GROUP BY name LIMIT 10", true},
		{"SELECT DISTINCT customer_id % 7 AS k FROM customers" + mine + " ORDER BY k LIMIT 5", true},
		{"SELECT DISTINCT customer_id FROM customers" + mine + " ORDER BY customer_id LIMIT 5", true},
		{"SELECT name FROM customers" + mine + " GROUP BY name HAVING count(*) > 1 LIMIT 10", true},
		{"SELECT customer_id, count(*) OVER () FROM customers" + mine + " LIMIT 3", true},
		{"SELECT customer_id FROM customers" + mine + " ORDER BY customer_id OFFSET 95", true},
		{"SELECT customer_id FROM customers" + mine + " ORDER BY customer_id FETCH FIRST 3 ROWS WITH TIES", true},
		// What the merges can do is still answered.
		{"SELECT customer_id FROM customers" + mine + " ORDER BY customer_id LIMIT 5", false},
		{"SELECT count(*) FROM customers" + mine, false},
		{"SELECT DISTINCT name FROM customers WHERE customer_id = 330042 LIMIT 10", false},
		{"SELECT name, count(*) FROM customers WHERE customer_id IN (330042, 330042) GROUP BY name LIMIT 10", false},
	})
}
