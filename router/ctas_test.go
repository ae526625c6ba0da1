package router_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestCreateTableAs: CREATE TABLE AS and SELECT INTO from unsharded tables
// answer as on one Postgres; the new table exists on every shard, as a
// table made by CREATE TABLE does, with its rows on the authoritative
// shard only. A relation made on the authoritative shard alone (by a DO
// block) drops without error.
func TestCreateTableAs(t *testing.T) {
	forgetCustomers(t)
	ctx := context.Background()
	reset := []string{
		"DROP TABLE IF EXISTS ctas_src, ctas_a, ctas_b, ctas_c, ctas_e",
		"CREATE TABLE ctas_src (id int, v text)",
		"INSERT INTO ctas_src VALUES (1, 'a'), (2, 'b'), (3, 'c')",
		"CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"DELETE FROM customers WHERE customer_id = 42",
	}
	script := []string{
		"CREATE TABLE ctas_a AS SELECT * FROM ctas_src WHERE id > 1",
		"SELECT * INTO ctas_b FROM ctas_src",
		"SELECT count(*), max(v) FROM ctas_a",
		"SELECT count(*) FROM ctas_b",
		"CREATE INDEX ON ctas_a (id)",
		"CREATE TABLE IF NOT EXISTS ctas_a AS SELECT 1",
		"BEGIN",
		"INSERT INTO customers VALUES (42, 'x')",
		"CREATE TABLE ctas_c (n) AS SELECT id FROM ctas_src WITH NO DATA",
		"SELECT count(*) FROM ctas_c",
		"COMMIT",
		"EXPLAIN (COSTS OFF) CREATE TABLE ctas_x AS SELECT 1",
		"DO $$BEGIN CREATE TABLE ctas_e (x int); END$$",
		"DROP TABLE ctas_e",
		"DROP TABLE ctas_e",
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		ref, conn := plainPostgres(t), connect(t, "store")
		mustExec(t, ref, reset...)
		mustExec(t, conn, reset...)
		for _, sql := range script {
			want, got := answer(ref, sql, mode), answer(conn, sql, mode)
			if got != want {
				t.Errorf("mode %v: %s\n  router:   %s\n  Postgres: %s", mode, sql, got, want)
			}
		}
		for _, shard := range []string{"customer-shard-1", "customer-shard-2"} {
			var n int
			if err := direct(t, shard, "store").QueryRow(ctx, "SELECT (SELECT count(*) FROM ctas_a) + (SELECT count(*) FROM ctas_b)").Scan(&n); err != nil {
				t.Errorf("mode %v: the new tables on %s: %v", mode, shard, err)
			} else if n != 0 {
				t.Errorf("mode %v: %s holds %d rows of the new unsharded tables", mode, shard, n)
			}
		}
		if _, err := conn.Exec(ctx, "CREATE TABLE ctas_d AS SELECT * FROM customers", mode); sqlstate(err) != "0A000" {
			t.Errorf("mode %v: CREATE TABLE AS from a sharded table: %v, want 0A000", mode, err)
		}
	}
}
