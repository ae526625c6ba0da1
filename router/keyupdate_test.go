package router_test

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// TestKeyUpdate: an UPDATE that changes a row's shard key moves the row
// to the shard its new key routes to, in one atomic commit, and answers
// (RETURNING, tag, errors) as one Postgres does, in the simple protocol
// and in pgx's extended modes (a named statement with binary results, and
// the unnamed one), with the keys as parameters. The reference is a
// plain table of the same shape, keyupd_ref, which the topology does not
// list: through the router it lives on shard-0 alone, a plain Postgres,
// and every statement runs on both.
func TestKeyUpdate(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"CREATE TABLE IF NOT EXISTS orders (order_id bigint, customer_id bigint, total numeric, PRIMARY KEY (customer_id, order_id))",
		"DROP TABLE IF EXISTS keyupd_ref",
		"CREATE TABLE keyupd_ref (customer_id bigint PRIMARY KEY, name text NOT NULL)",
	)
	shards := map[string]*pgx.Conn{}
	for _, s := range []string{"customer-shard-1", "customer-shard-2", "shard-0"} {
		shards[s] = direct(t, s, "store")
	}
	snap, err := cluster.Store().GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	placement := snap.Topology.Resolve("store", "public", "customers")
	shardOf := func(id int64) string {
		_, s, err := placement.RouteInt(id)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	// This test's customers are 771000..772999: ids of each shard.
	const lo, hi = 771000, 772999
	var on1, on2 []int64
	for id := int64(lo); id < lo+200; id++ {
		if shardOf(id) == "customer-shard-1" {
			on1 = append(on1, id)
		} else {
			on2 = append(on2, id)
		}
	}
	cleanup := func() {
		conn.Exec(ctx, fmt.Sprintf("DELETE FROM customers WHERE customer_id BETWEEN %d AND %d", lo, hi))
	}
	t.Cleanup(func() {
		cleanup()
		conn.Exec(ctx, "DROP TABLE IF EXISTS keyupd_ref")
	})
	// reset loads the same rows into both tables: on1[0..4] and
	// on2[0..4], named after their ids.
	reset := func(t *testing.T) {
		t.Helper()
		cleanup()
		mustExec(t, conn, "DELETE FROM keyupd_ref")
		for _, id := range append(slices.Clone(on1[:5]), on2[:5]...) {
			for _, table := range []string{"customers", "keyupd_ref"} {
				mustExec(t, conn, fmt.Sprintf("INSERT INTO %s VALUES (%d, 'n%d')", table, id, id))
			}
		}
	}
	// contents renders a table's rows in this test's range, sorted.
	contents := func(t *testing.T, table string) []string {
		t.Helper()
		got, err := sortedAnswer(conn, fmt.Sprintf("SELECT customer_id, name FROM %s WHERE customer_id BETWEEN %d AND %d", table, lo, hi))
		if err != nil {
			t.Fatal(err)
		}
		return got
	}
	// placed checks every row of the range is on exactly the shard its
	// key routes to, and that the sharded table holds what the
	// reference does.
	placed := func(t *testing.T, what string) {
		t.Helper()
		seen := map[int64]string{}
		for s, dc := range shards {
			rows, _ := dc.Query(ctx, fmt.Sprintf("SELECT customer_id FROM customers WHERE customer_id BETWEEN %d AND %d", lo, hi))
			ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
			if err != nil {
				t.Fatal(err)
			}
			for _, id := range ids {
				if seen[id] != "" {
					t.Errorf("%s: customer %d on %s and %s", what, id, seen[id], s)
				}
				seen[id] = s
				if want := shardOf(id); want != s {
					t.Errorf("%s: customer %d on %s, its key routes to %s", what, id, s, want)
				}
			}
		}
		if got, want := contents(t, "customers"), contents(t, "keyupd_ref"); !reflect.DeepEqual(got, want) {
			t.Errorf("%s: rows\n got %v\nwant %v", what, got, want)
		}
	}
	// answer runs sql (with $T for the table) on the sharded table and
	// on the reference, and checks both give the same rows, tag and
	// error code.
	type result struct {
		rows   []string
		fields []string
		tag    string
		code   string
	}
	// mode is the protocol of run: pgx's simple protocol, or one of its
	// extended modes (with Parse, Bind and Describe of the portal).
	mode := pgx.QueryExecModeSimpleProtocol
	run := func(c *pgx.Conn, sql string, args ...any) result {
		rows, err := c.Query(ctx, sql, append([]any{mode}, args...)...)
		var res result
		if err == nil {
			res.rows, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (string, error) {
				v, err := r.Values()
				return fmt.Sprint(v), err
			})
			for _, f := range rows.FieldDescriptions() {
				res.fields = append(res.fields, fmt.Sprint(f.Name, f.DataTypeOID))
			}
			res.tag = rows.CommandTag().String()
		}
		if err != nil {
			res.code = sqlstate(err)
			if res.code == "" {
				res.code = err.Error()
			}
		}
		slices.Sort(res.rows)
		return res
	}
	answer := func(t *testing.T, c *pgx.Conn, sql string, args ...any) result {
		t.Helper()
		got := run(c, strings.ReplaceAll(sql, "$T", "customers"), args...)
		want := run(c, strings.ReplaceAll(sql, "$T", "keyupd_ref"), args...)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s %v:\n got %+v\nwant %+v", sql, args, got, want)
		}
		return got
	}

	moves := func(t *testing.T) {
		t.Run("moves", func(t *testing.T) {
			reset(t)
			a, b := on1[0], on2[10] // b: a free key on the other shard
			res := answer(t, conn, "UPDATE $T SET customer_id = $1, name = name || '-moved' WHERE customer_id = $2 RETURNING name, customer_id", b, a)
			if res.tag != "UPDATE 1" || len(res.rows) != 1 {
				t.Errorf("one row: %+v", res)
			}
			placed(t, "one row")
			// Every row of both shards moves by an expression of its old
			// key; some land on their own shard, some on the other.
			res = answer(t, conn, "UPDATE $T AS c SET customer_id = c.customer_id + $1 WHERE customer_id BETWEEN $2 AND $3 RETURNING *", int64(1000), int64(lo), int64(lo+999))
			if res.tag != "UPDATE 10" || len(res.rows) != 10 {
				t.Errorf("every row: %+v", res)
			}
			placed(t, "every row")
			// Without RETURNING; and a WHERE that finds nothing.
			// (Bounded above: other tests keep customers beyond this
			// test's ids.)
			res = answer(t, conn, "UPDATE $T SET customer_id = customer_id - 1000 WHERE customer_id > $1 AND customer_id <= $2 AND name LIKE 'n%'", int64(lo+999), int64(hi))
			if res.tag != "UPDATE 10" {
				t.Errorf("without RETURNING: %+v", res)
			}
			res = answer(t, conn, "UPDATE $T SET customer_id = 1 WHERE customer_id = $1 RETURNING customer_id, name", int64(-5))
			if res.tag != "UPDATE 0" || len(res.fields) != 2 {
				t.Errorf("no row: %+v", res)
			}
			placed(t, "no row")
		})

		t.Run("unique violation rolls back every shard", func(t *testing.T) {
			reset(t)
			// on1[0] and on1[1] move to on2[10] and on2[1]: the first is
			// free, the second is taken on the new shard.
			res := answer(t, conn, "UPDATE $T SET customer_id = CASE customer_id WHEN $1::bigint THEN $2::bigint ELSE $3::bigint END WHERE customer_id IN ($4, $5)",
				on1[0], on2[10], on2[1], on1[0], on1[1])
			if res.code != "23505" {
				t.Errorf("want a unique violation: %+v", res)
			}
			placed(t, "after the violation")
			if got := contents(t, "customers"); len(got) != 10 {
				t.Errorf("after the violation: %v", got)
			}
		})

		t.Run("transaction", func(t *testing.T) {
			reset(t)
			a, b := on1[0], on2[10]
			for _, end := range []string{"ROLLBACK", "COMMIT"} {
				tx := connect(t, "store")
				mustExec(t, tx, "BEGIN")
				res := run(tx, "UPDATE customers SET customer_id = $1 WHERE customer_id = $2 RETURNING customer_id", b, a)
				if res.tag != "UPDATE 1" || len(res.rows) != 1 {
					t.Fatalf("%s: %+v", end, res)
				}
				var n int
				if err := tx.QueryRow(ctx, "SELECT count(*) FROM customers WHERE customer_id = $1", b).Scan(&n); err != nil || n != 1 {
					t.Errorf("%s: inside the transaction the moved row is seen %d times (%v)", end, n, err)
				}
				mustExec(t, tx, end)
				if end == "COMMIT" {
					mustExec(t, conn, fmt.Sprintf("UPDATE keyupd_ref SET customer_id = %d WHERE customer_id = %d", b, a))
				}
				placed(t, end)
			}
			// A failure inside a transaction fails it; ROLLBACK undoes all.
			reset(t)
			mustExec(t, conn, "BEGIN")
			res := run(conn, "UPDATE customers SET customer_id = $1 WHERE customer_id IN ($2, $3)", on2[1], on1[0], on1[1])
			if res.code != "23505" {
				t.Errorf("in a transaction: %+v", res)
			}
			mustExec(t, conn, "ROLLBACK")
			placed(t, "after ROLLBACK of a failed move")
		})
	}

	// The same statements in each protocol; pgx's simple protocol writes
	// the arguments into the text as literals.
	for _, m := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		mode = m
		t.Run(m.String(), func(t *testing.T) {
			moves(t)
		})
	}
	mode = pgx.QueryExecModeSimpleProtocol
	t.Run("extended protocol refusals", func(t *testing.T) {
		reset(t)
		// A parameter in RETURNING: the INSERT that returns has no Bind.
		_, err := conn.Exec(ctx, "UPDATE customers SET customer_id = $1 WHERE customer_id = $2 RETURNING name || $3", on2[10], on1[0], "x")
		if sqlstate(err) != "0A000" {
			t.Errorf("RETURNING $3: %v", err)
		}
		placed(t, "extended refusals")
	})

	t.Run("refusals", func(t *testing.T) {
		reset(t)
		for _, sql := range []string{
			"UPDATE customers SET customer_id = DEFAULT WHERE customer_id = %d",
			"UPDATE customers SET (customer_id, name) = (1, 'x') WHERE customer_id = %d",
			"UPDATE customers SET customer_id = o.customer_id FROM orders o WHERE o.customer_id = customers.customer_id AND customers.customer_id = %d",
		} {
			_, err := conn.Exec(ctx, fmt.Sprintf(sql, on1[0]), pgx.QueryExecModeSimpleProtocol)
			if sqlstate(err) != "0A000" {
				t.Errorf("%s: %v", sql, err)
			}
		}
		// A trigger would see a DELETE and an INSERT, not an UPDATE.
		mustExec(t, conn,
			"CREATE OR REPLACE FUNCTION keyupd_touch() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RETURN NEW; END $$",
			"CREATE TRIGGER keyupd_touch BEFORE UPDATE ON customers FOR EACH ROW EXECUTE FUNCTION keyupd_touch()")
		defer conn.Exec(ctx, "DROP FUNCTION IF EXISTS keyupd_touch() CASCADE")
		_, err := conn.Exec(ctx, fmt.Sprintf("UPDATE customers SET customer_id = %d WHERE customer_id = %d", on2[10], on1[0]), pgx.QueryExecModeSimpleProtocol)
		var pe *pgconn.PgError
		if sqlstate(err) != "0A000" || !errors.As(err, &pe) || !strings.Contains(pe.Message, "triggers") {
			t.Errorf("with a trigger: %v", err)
		}
		mustExec(t, conn, "DROP TRIGGER keyupd_touch ON customers")
		placed(t, "refusals")
	})
}
