package router_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestTemporaryRelationsStayOnTheirShard: DDL on temporary relations, and
// on what Postgres makes temporary because it depends on one, runs only on
// the authoritative shard where they exist; a permanent relation of the
// same name made afterwards is DDL for every shard again. Each statement
// must answer as on one plain Postgres.
func TestTemporaryRelationsStayOnTheirShard(t *testing.T) {
	script := []string{
		"CREATE TEMP TABLE tmp_a (x int)",
		"CREATE INDEX tmp_a_i ON tmp_a (x)",
		"CREATE VIEW tmp_v AS SELECT x FROM tmp_a",
		"SELECT relpersistence FROM pg_class WHERE relname = 'tmp_v'",
		"ALTER TABLE tmp_a ADD COLUMN y int",
		"CREATE RULE tmp_v_ins AS ON INSERT TO tmp_v DO INSTEAD INSERT INTO tmp_a (x, y) VALUES (new.x, 1)",
		"INSERT INTO tmp_v VALUES (5)",
		"SELECT x, y FROM tmp_a",
		"ALTER INDEX tmp_a_i RENAME TO tmp_a_j",
		"COMMENT ON TABLE tmp_a IS 'temporary'",
		"DROP VIEW tmp_v",
		"DROP INDEX tmp_a_j",
		"DROP TABLE tmp_a",
		"CREATE TABLE tmp_a (x int)",
		"SELECT count(*) FROM tmp_a",
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		ref, conn := plainPostgres(t), connect(t, "store")
		for _, c := range []*pgx.Conn{ref, conn} {
			mustExec(t, c, "DROP TABLE IF EXISTS tmp_a")
		}
		for _, sql := range script {
			want, got := answer(ref, sql, mode), answer(conn, sql, mode)
			if got != want {
				t.Errorf("mode %v: %s\n  router:   %s\n  Postgres: %s", mode, sql, got, want)
			}
		}
		// The permanent table is on every shard, as DDL makes tables.
		for _, shard := range []string{"shard-0", "customer-shard-1", "customer-shard-2"} {
			var n int
			if err := direct(t, shard, "store").QueryRow(context.Background(),
				"SELECT count(*) FROM pg_class WHERE relname = 'tmp_a' AND relpersistence = 'p'").Scan(&n); err != nil {
				t.Fatal(err)
			}
			if n != 1 {
				t.Errorf("mode %v: permanent table tmp_a on %s: %d, want 1", mode, shard, n)
			}
		}
		mustExec(t, conn, "DROP TABLE tmp_a")
		mustExec(t, ref, "DROP TABLE tmp_a")
	}
}
