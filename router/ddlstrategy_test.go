package router_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tesseradb/tessera/pgerr"
)

// TestDDLStrategyWithoutTemporal: the test cluster's router has no
// OnlineDDL starter, so a session's online schema change is refused with
// 0A000 and runs nowhere, while DDL that OnlineDDL does not take (CREATE
// TABLE) and every session under the default strategy run as written.
// Bad values, a transaction block, a string of several statements and the
// extended protocol get their own SQLSTATEs. The migrations themselves
// run in e2e (TestDDLStrategyFromPsql), against a real Temporal.
func TestDDLStrategyWithoutTemporal(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	mustExec(t, conn, "DROP TABLE IF EXISTS ddl_strategy_t", "CREATE TABLE ddl_strategy_t (id int PRIMARY KEY)")
	code := func(err error) string {
		if pe, ok := err.(*pgconn.PgError); ok {
			return pe.Code
		}
		return ""
	}
	var v string
	if err := conn.QueryRow(ctx, "SHOW tessera.ddl_strategy", pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil || v != "direct" {
		t.Fatalf("default tessera.ddl_strategy = %q, %v", v, err)
	}
	if _, err := conn.Exec(ctx, "SET tessera.ddl_strategy = 'later'"); code(err) != pgerr.InvalidParameterValue {
		t.Errorf("a bad value: %v, want 22023", err)
	}
	mustExec(t, conn, "SET tessera.ddl_strategy = 'online'")
	if err := conn.QueryRow(ctx, "SHOW tessera.ddl_strategy", pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil || v != "online" {
		t.Fatalf("tessera.ddl_strategy = %q, %v", v, err)
	}

	for _, c := range []struct{ what, sql, code string }{
		{"no Temporal", "ALTER TABLE ddl_strategy_t ADD COLUMN a int", pgerr.FeatureNotSupported},
		{"a string of statements", "ALTER TABLE ddl_strategy_t ADD COLUMN a int; SELECT 1", pgerr.ActiveSQLTransaction},
		{"two schema changes in one string", "ALTER TABLE ddl_strategy_t ADD COLUMN a int, ADD COLUMN b int; ALTER TABLE ddl_strategy_t ADD COLUMN c int", pgerr.ActiveSQLTransaction},
	} {
		if _, err := conn.Exec(ctx, c.sql); code(err) != c.code {
			t.Errorf("%s: %v, want %s", c.what, err, c.code)
		}
	}
	// The extended protocol cannot carry the migration's answer.
	if _, err := conn.Exec(ctx, "ALTER TABLE ddl_strategy_t ADD COLUMN a int", pgx.QueryExecModeExec); code(err) != pgerr.FeatureNotSupported {
		t.Errorf("extended protocol: %v, want 0A000", err)
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "ALTER TABLE ddl_strategy_t ADD COLUMN a int"); code(err) != pgerr.ActiveSQLTransaction {
		t.Errorf("in a transaction block: %v, want 25001", err)
	}
	tx.Rollback(ctx)

	// None of them ran.
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM information_schema.columns WHERE table_name = 'ddl_strategy_t'").Scan(&n); err != nil || n != 1 {
		t.Fatalf("ddl_strategy_t has %d columns (%v): a refused change ran", n, err)
	}
	// DDL OnlineDDL does not take runs as written.
	mustExec(t, conn, "CREATE TABLE ddl_strategy_u (id int)", "DROP TABLE ddl_strategy_u")
	// The default strategy runs ALTER TABLE as before.
	mustExec(t, conn, "RESET tessera.ddl_strategy", "ALTER TABLE ddl_strategy_t ADD COLUMN a int", "DROP TABLE ddl_strategy_t")
}
