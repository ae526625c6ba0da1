package router_test

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// Customer ids and their shards (tessera topo route --file
// testdata/topologies/store_xxhash.json --table store.public.customers
// --type bigint N).
var splitShard = map[int64]string{
	42: "customer-shard-1", 2: "customer-shard-1", 6: "customer-shard-1", 8: "customer-shard-1",
	1: "customer-shard-2", 3: "customer-shard-2", 4: "customer-shard-2", 5: "customer-shard-2",
}

// splitRow is one orders row: order_id, customer_id.
type splitRow struct{ Order, Customer int64 }

// TestInsertSplitAcrossShards: a multi-row INSERT whose rows land on
// different shards is split by shard, answers as one statement (one
// count, RETURNING in VALUES order), and each row is on its shard.
func TestInsertSplitAcrossShards(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS orders (order_id bigint, customer_id bigint, total numeric, PRIMARY KEY (customer_id, order_id))"); err != nil {
		t.Fatal(err)
	}
	clean := func(t *testing.T) {
		t.Helper()
		if _, err := conn.Exec(ctx, "DELETE FROM orders WHERE order_id BETWEEN 880000 AND 889999"); err != nil {
			t.Fatal(err)
		}
	}
	clean(t)
	shards := map[string]*pgx.Conn{}
	for _, s := range []string{"customer-shard-1", "customer-shard-2", "shard-0"} {
		shards[s] = direct(t, s, "store")
	}
	// where checks that exactly the given orders exist among 880000..,
	// each only on its customer's shard.
	where := func(t *testing.T, what string, want ...splitRow) {
		t.Helper()
		got := map[int64]string{}
		for s, dc := range shards {
			rows, _ := dc.Query(ctx, "SELECT order_id, customer_id FROM orders WHERE order_id BETWEEN 880000 AND 889999")
			list, err := pgx.CollectRows(rows, pgx.RowToStructByPos[splitRow])
			if err != nil {
				t.Fatal(err)
			}
			for _, r := range list {
				if got[r.Order] != "" {
					t.Errorf("%s: order %d on %s and %s", what, r.Order, got[r.Order], s)
				}
				got[r.Order] = s
				if splitShard[r.Customer] != s {
					t.Errorf("%s: order %d of customer %d on %s, want %s", what, r.Order, r.Customer, s, splitShard[r.Customer])
				}
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: %d orders stored, want %d (%v)", what, len(got), len(want), got)
		}
		for _, r := range want {
			if got[r.Order] == "" {
				t.Errorf("%s: order %d missing", what, r.Order)
			}
		}
	}
	// returning runs an INSERT ... RETURNING order_id, customer_id and
	// checks the rows come back in VALUES order with the right count.
	returning := func(t *testing.T, what string, want []splitRow, sql string, args ...any) {
		t.Helper()
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowToStructByPos[splitRow])
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if !reflect.DeepEqual(got, want) {
			t.Errorf("%s: RETURNING\n got %v\nwant %v", what, got, want)
		}
		if tag := rows.CommandTag().String(); tag != fmt.Sprintf("INSERT 0 %d", len(want)) {
			t.Errorf("%s: tag %q", what, tag)
		}
	}
	// Rows alternating between the shards.
	alternating := []splitRow{{880001, 42}, {880002, 1}, {880003, 2}, {880004, 3}, {880005, 6}, {880006, 4}}
	values := func(rows []splitRow, params bool) (string, []any) {
		var parts []string
		var args []any
		for i, r := range rows {
			if params {
				parts = append(parts, fmt.Sprintf("($%d, $%d, $%d)", 3*i+1, 3*i+2, 3*i+3))
				args = append(args, r.Order, r.Customer, fmt.Sprint(i, ".5"))
			} else {
				parts = append(parts, fmt.Sprintf("(%d, %d, %d.5)", r.Order, r.Customer, i))
			}
		}
		return strings.Join(parts, ", "), args
	}

	t.Run("simple", func(t *testing.T) {
		clean(t)
		v, _ := values(alternating, false)
		returning(t, "simple", alternating, "INSERT INTO orders (order_id, customer_id, total) VALUES "+v+" RETURNING order_id, customer_id", pgx.QueryExecModeSimpleProtocol)
		where(t, "simple", alternating...)
		// Without RETURNING: one CommandComplete counting every shard's rows.
		clean(t)
		tag, err := conn.Exec(ctx, "INSERT INTO orders (order_id, customer_id, total) VALUES "+v, pgx.QueryExecModeSimpleProtocol)
		if err != nil || tag.String() != "INSERT 0 6" {
			t.Fatalf("simple without RETURNING: %v %v", tag, err)
		}
		where(t, "simple without RETURNING", alternating...)
		// ON CONFLICT DO NOTHING counts only the rows inserted, on both shards.
		more := append([]splitRow{{880007, 5}}, alternating[:3]...)
		more = append(more, splitRow{880008, 8})
		v2, _ := values(more, false)
		tag, err = conn.Exec(ctx, "INSERT INTO orders (order_id, customer_id, total) VALUES "+v2+" ON CONFLICT DO NOTHING", pgx.QueryExecModeSimpleProtocol)
		if err != nil || tag.String() != "INSERT 0 2" {
			t.Errorf("ON CONFLICT DO NOTHING: %v %v, want INSERT 0 2", tag, err)
		}
		where(t, "ON CONFLICT DO NOTHING", append(alternating, splitRow{880007, 5}, splitRow{880008, 8})...)
		// DO UPDATE returns every row, in VALUES order.
		returning(t, "DO UPDATE", more, "INSERT INTO orders (order_id, customer_id, total) VALUES "+v2+
			" ON CONFLICT (customer_id, order_id) DO UPDATE SET total = excluded.total + 100 RETURNING order_id, customer_id", pgx.QueryExecModeSimpleProtocol)
		var total string
		if err := conn.QueryRow(ctx, "SELECT total::text FROM orders WHERE customer_id = 1 AND order_id = 880002").Scan(&total); err != nil || total != "102.5" {
			t.Errorf("DO UPDATE: total %q %v", total, err)
		}
		// What cannot be split is refused, and nothing is inserted.
		_, err = conn.Exec(ctx, "INSERT INTO orders (order_id, customer_id) VALUES (880010, 42), (880011, 1) ON CONFLICT DO NOTHING RETURNING order_id", pgx.QueryExecModeSimpleProtocol)
		if sqlstate(err) != "0A000" || !strings.Contains(err.Error(), "ON CONFLICT DO NOTHING and RETURNING") {
			t.Errorf("DO NOTHING with RETURNING across shards: %v, want 0A000", err)
		}
		_, err = conn.Exec(ctx, "WITH x AS (SELECT 1) INSERT INTO orders (order_id, customer_id) VALUES (880010, 42), (880011, 1)", pgx.QueryExecModeSimpleProtocol)
		if sqlstate(err) != "0A000" {
			t.Errorf("WITH across shards: %v, want 0A000", err)
		}
		where(t, "refused", append(alternating, splitRow{880007, 5}, splitRow{880008, 8})...)
		// EXPLAIN (TESSERA) shows the split.
		rows, _ := conn.Query(ctx, "EXPLAIN (TESSERA) INSERT INTO orders (order_id, customer_id) VALUES (1, 42), (2, 1)", pgx.QueryExecModeSimpleProtocol)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		if err != nil || !strings.Contains(strings.Join(lines, "\n"), "Shard customer-shard-2 (rows 2): INSERT INTO orders (order_id, customer_id) VALUES (2, 1)") {
			t.Errorf("EXPLAIN (TESSERA): %q %v", lines, err)
		}
	})

	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheDescribe, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
		t.Run(fmt.Sprint("extended ", mode), func(t *testing.T) {
			clean(t)
			// int8 parameters in binary, numeric ones in text.
			v, args := values(alternating, true)
			sql := "INSERT INTO orders (order_id, customer_id, total) VALUES " + v + " RETURNING order_id, customer_id"
			returning(t, "first", alternating, sql, append([]any{mode}, args...)...)
			where(t, "first", alternating...)
			// The same statement again with another spread: 4 rows on
			// shard 2, 2 on shard 1, in another order.
			second := []splitRow{{880101, 3}, {880102, 4}, {880103, 8}, {880104, 5}, {880105, 1}, {880106, 2}}
			_, args = values(second, true)
			returning(t, "second", second, sql, append([]any{mode}, args...)...)
			// And with every row on one shard: an ordinary INSERT.
			third := []splitRow{{880201, 42}, {880202, 2}, {880203, 6}, {880204, 8}, {880205, 42}, {880206, 2}}
			_, args = values(third, true)
			returning(t, "one shard", third, sql, append([]any{mode}, args...)...)
			where(t, "prepared, three executions", append(append(append([]splitRow{}, alternating...), second...), third...)...)
			// A NULL outside the key, a parameter used in two rows, and
			// one after the rows.
			clean(t)
			tag, err := conn.Exec(ctx, "INSERT INTO orders (order_id, customer_id, total) VALUES ($1, $2, $5), ($3, $4, $5) ON CONFLICT (customer_id, order_id) DO UPDATE SET total = $6",
				mode, int64(880301), int64(42), int64(880302), int64(1), nil, "7")
			if err != nil || tag.String() != "INSERT 0 2" {
				t.Errorf("shared parameters: %v %v", tag, err)
			}
			tag, err = conn.Exec(ctx, "INSERT INTO orders (order_id, customer_id, total) VALUES ($1, $2, $5), ($3, $4, $5) ON CONFLICT (customer_id, order_id) DO UPDATE SET total = $6",
				mode, int64(880301), int64(42), int64(880302), int64(1), nil, "7")
			if err != nil || tag.String() != "INSERT 0 2" {
				t.Errorf("shared parameters again: %v %v", tag, err)
			}
			var n int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM orders WHERE customer_id IN (1) AND order_id = 880302 AND total = 7").Scan(&n); err != nil || n != 1 {
				t.Errorf("DO UPDATE with a parameter after the rows: %d %v", n, err)
			}
			where(t, "shared parameters", splitRow{880301, 42}, splitRow{880302, 1})
		})
	}

	t.Run("batch", func(t *testing.T) {
		clean(t)
		// Split INSERTs among statements for one shard, in one pgx batch.
		b := &pgx.Batch{}
		b.Queue("INSERT INTO orders (order_id, customer_id) VALUES ($1, $2), ($3, $4) RETURNING order_id", int64(880401), int64(42), int64(880402), int64(1))
		b.Queue("SELECT count(*) FROM orders WHERE customer_id = $1 AND order_id BETWEEN 880000 AND 889999", int64(1))
		b.Queue("INSERT INTO orders (order_id, customer_id) VALUES ($1, $2), ($3, $4)", int64(880403), int64(3), int64(880404), int64(2))
		br := conn.SendBatch(ctx, b)
		rows, _ := br.Query()
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || !reflect.DeepEqual(ids, []int64{880401, 880402}) {
			t.Errorf("batch insert: %v %v", ids, err)
		}
		var n int
		if err := br.QueryRow().Scan(&n); err != nil || n != 1 {
			t.Errorf("batch count: %d %v", n, err)
		}
		if tag, err := br.Exec(); err != nil || tag.String() != "INSERT 0 2" {
			t.Errorf("batch second insert: %v %v", tag, err)
		}
		if err := br.Close(); err != nil {
			t.Fatal(err)
		}
		where(t, "batch", splitRow{880401, 42}, splitRow{880402, 1}, splitRow{880403, 3}, splitRow{880404, 2})
	})

	t.Run("transaction", func(t *testing.T) {
		clean(t)
		v, args := values(alternating, true)
		sql := "INSERT INTO orders (order_id, customer_id, total) VALUES " + v
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			// Rolled back on both shards.
			tx, err := conn.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if tag, err := tx.Exec(ctx, sql, append([]any{mode}, args...)...); err != nil || tag.String() != "INSERT 0 6" {
				t.Fatalf("in a transaction (%v): %v %v", mode, tag, err)
			}
			var n int
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM orders WHERE customer_id = 1 AND order_id = 880002").Scan(&n); err != nil || n != 1 {
				t.Errorf("read in the transaction: %d %v", n, err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
			where(t, fmt.Sprint("rolled back ", mode))
		}
		// Committed on both.
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, sql, args...); err != nil {
			t.Fatal(err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatal(err)
		}
		where(t, "committed", alternating...)
		// A duplicate on the second shard fails the statement and the
		// transaction; the rollback removes the first shard's rows too.
		tx, err = conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = tx.Exec(ctx, "INSERT INTO orders (order_id, customer_id) VALUES (880501, 42), (880002, 1)")
		if sqlstate(err) != "23505" {
			t.Errorf("duplicate on the second shard: %v, want 23505", err)
		}
		if _, err := tx.Exec(ctx, "SELECT 1"); sqlstate(err) != "25P02" {
			t.Errorf("after the error: %v, want 25P02", err)
		}
		tx.Rollback(ctx)
		where(t, "failed transaction", alternating...)
	})

	// Outside a transaction the INSERT is all or nothing, as on one
	// Postgres: a duplicate on the second shard leaves no row on the
	// first, and the session is not left in a transaction.
	t.Run("atomic", func(t *testing.T) {
		clean(t)
		v, args := values(alternating, true)
		if _, err := conn.Exec(ctx, "INSERT INTO orders (order_id, customer_id, total) VALUES "+v, args...); err != nil {
			t.Fatal(err)
		}
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			_, err := conn.Exec(ctx, "INSERT INTO orders (order_id, customer_id) VALUES ($1, $2), ($3, $4)", mode, int64(880601), int64(42), int64(880002), int64(1))
			if sqlstate(err) != "23505" {
				t.Errorf("duplicate on the second shard (%v): %v, want 23505", mode, err)
			}
			where(t, fmt.Sprint("all or nothing ", mode), alternating...)
			if st := conn.PgConn().TxStatus(); st != 'I' {
				t.Errorf("after the failed INSERT (%v) the session's status is %c, want I", mode, st)
			}
		}
		if tag, err := conn.Exec(ctx, "INSERT INTO orders (order_id, customer_id) VALUES (880602, 42), (880603, 1)"); err != nil || tag.String() != "INSERT 0 2" {
			t.Fatalf("after the failures: %v %v", tag, err)
		}
		where(t, "after the failures", append(alternating, splitRow{880602, 42}, splitRow{880603, 1})...)
	})
	clean(t)
}
