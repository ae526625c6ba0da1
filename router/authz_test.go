package router_test

import (
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestSessionAuthorizationResetOnEveryShard: RESET SESSION AUTHORIZATION
// returns every shard's backend to the login role, not only the one that
// ran it (RESET ALL, which gives a backend the session's settings, leaves
// session_authorization alone).
func TestSessionAuthorizationResetOnEveryShard(t *testing.T) {
	script := []string{
		"SET SESSION AUTHORIZATION authz_probe",
		"SELECT current_user",
		"SELECT current_user, count(*) FROM customers WHERE customer_id = 42",
		"RESET SESSION AUTHORIZATION",
		"SELECT current_user, count(*) FROM customers WHERE customer_id = 42",
		"SELECT current_user, count(*) FROM customers WHERE customer_id = 1",
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		ref, conn := plainPostgres(t), connect(t, "store")
		// Roles belong to the cluster: the reference database shares
		// shard-0's.
		conn.Exec(t.Context(), "CREATE ROLE authz_probe")
		for _, c := range []*pgx.Conn{ref, conn} {
			mustExec(t, c, "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
				"GRANT SELECT ON customers TO authz_probe")
		}
		for _, sql := range script {
			want, got := answer(ref, sql, mode), answer(conn, sql, mode)
			if got != want {
				t.Errorf("mode %v: %s\n  router:   %s\n  Postgres: %s", mode, sql, got, want)
			}
		}
	}
}
