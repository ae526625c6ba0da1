package router_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The gather path (router/gather.go) on the store example: customers is
// sharded over customer-shard-1 and -2, gather_notes unsharded on
// shard-0. A join of the two on a column other than the shard key is
// one the shards cannot answer alone.

// gatherKeys is the range of customer ids these tests own.
const gatherKeys = "customer_id BETWEEN 7700000 AND 7700999"

func gatherSetup(t *testing.T) *pgx.Conn {
	t.Helper()
	conn := connect(t, "store")
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"CREATE TABLE IF NOT EXISTS gather_notes (id int PRIMARY KEY, name text)",
		"DELETE FROM customers WHERE "+gatherKeys,
		"DELETE FROM gather_notes",
		"INSERT INTO gather_notes SELECT g, 'n' || g FROM generate_series(0, 9) g",
	)
	// INSERT ... SELECT into a sharded table is refused: VALUES rows,
	// which the router splits by shard.
	var values []string
	for g := range 300 {
		values = append(values, fmt.Sprintf("(%d, 'n%d')", 7700000+g, g%7))
	}
	mustExec(t, conn, "INSERT INTO customers VALUES "+strings.Join(values, ", "))
	return conn
}

// gatherJoin counts the pairs of a join not on the shard key: 300
// customers, each name n0..n6 matching one note.
const gatherJoin = "SELECT count(*) FROM customers c JOIN gather_notes n ON n.name = c.name WHERE c." + gatherKeys

// leftBehind counts the gathers' temporary tables and the backends still
// running a gather's statement or inside its transaction on the
// authoritative shard, waiting a little for a cancelled one to end.
func leftBehind(t *testing.T) (tables, backends int) {
	t.Helper()
	admin := direct(t, "shard-0", "store")
	deadline := time.Now().Add(10 * time.Second)
	for {
		if err := admin.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_class WHERE relname LIKE 'tessera\\_gather\\_%'").Scan(&tables); err != nil {
			t.Fatal(err)
		}
		if err := admin.QueryRow(context.Background(),
			"SELECT count(*) FROM pg_stat_activity WHERE state <> 'idle' AND query LIKE '%tessera_gather%' AND pid <> pg_backend_pid()").Scan(&backends); err != nil {
			t.Fatal(err)
		}
		if tables == 0 && backends == 0 || time.Now().After(deadline) {
			return tables, backends
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func countOf(t *testing.T, conn *pgx.Conn, sql string, mode pgx.QueryExecMode) (int64, error) {
	t.Helper()
	var n int64
	err := conn.QueryRow(context.Background(), sql, mode).Scan(&n)
	return n, err
}

// TestGatherAnswersAndCleansUp: the join is answered in both protocols
// (and inside a transaction, seeing its own writes), EXPLAIN (TESSERA)
// shows the plan, and no temporary table is left, nor visible to the
// client's own session.
func TestGatherAnswersAndCleansUp(t *testing.T) {
	conn := gatherSetup(t)
	ctx := context.Background()
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		n, err := countOf(t, conn, gatherJoin, mode)
		if err != nil || n != 300 {
			t.Fatalf("mode %v: %d, %v; want 300", mode, n, err)
		}
	}
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "INSERT INTO customers VALUES (7700900, 'n1'), (7700901, 'n2')"); err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO gather_notes VALUES (100, 'n1')"); err != nil {
		t.Fatal(err)
	}
	var n int64
	// 302 customers; the 44 named n1 (43 + 1) now match two notes each.
	if err := tx.QueryRow(ctx, gatherJoin).Scan(&n); err != nil || n != 302+44 {
		t.Fatalf("in the transaction: %d, %v; want %d", n, err, 302+44)
	}
	var own int64
	if err := tx.QueryRow(ctx, "SELECT count(*) FROM pg_class WHERE relname LIKE 'tessera\\_gather\\_%'").Scan(&own); err != nil || own != 0 {
		t.Fatalf("the client's session sees %d gather tables (%v)", own, err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	var plan []string
	rows, err := conn.Query(ctx, "EXPLAIN (TESSERA) "+gatherJoin, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var line string
		rows.Scan(&line)
		plan = append(plan, line)
	}
	text := strings.Join(plan, "\n")
	for _, want := range []string{"Route: gathered", "Gather and compute on shard shard-0", "Shard customer-shard-1: SELECT", "Shard customer-shard-2: SELECT"} {
		if !strings.Contains(text, want) {
			t.Errorf("EXPLAIN (TESSERA) lacks %q:\n%s", want, text)
		}
	}
	if tables, backends := leftBehind(t); tables != 0 || backends != 0 {
		t.Fatalf("left behind: %d temporary tables, %d backends in a gather's transaction", tables, backends)
	}
}

// TestGatherAppliesPrivileges: a role without SELECT on the sharded table
// is refused with Postgres's 42501, through both protocols, and is
// answered once granted; nothing is left behind after the errors.
func TestGatherAppliesPrivileges(t *testing.T) {
	admin := gatherSetup(t)
	mustExec(t, admin, "DROP ROLE IF EXISTS gather_reader", "CREATE ROLE gather_reader LOGIN PASSWORD 'g'",
		"GRANT SELECT ON gather_notes TO gather_reader")
	t.Cleanup(func() {
		admin.Exec(context.Background(), "DROP OWNED BY gather_reader")
		admin.Exec(context.Background(), "DROP ROLE IF EXISTS gather_reader")
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	reader, err := pgx.Connect(ctx, fmt.Sprintf("postgres://gather_reader:g@%s/store?sslmode=disable", cluster.Info().Router))
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Close(context.Background())
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec} {
		if _, err := countOf(t, reader, gatherJoin, mode); sqlstate(err) != "42501" {
			t.Fatalf("mode %v without SELECT on customers: %v, want 42501", mode, err)
		}
	}
	mustExec(t, admin, "GRANT SELECT ON customers TO gather_reader")
	if n, err := countOf(t, reader, gatherJoin, pgx.QueryExecModeSimpleProtocol); err != nil || n != 300 {
		t.Fatalf("granted: %d, %v; want 300", n, err)
	}
	if tables, backends := leftBehind(t); tables != 0 || backends != 0 {
		t.Fatalf("left behind: %d temporary tables, %d backends in a gather's transaction", tables, backends)
	}
}

// TestGatherErrorsCancelAndLimit: an error of the computed statement is
// Postgres's, a cancel ends a long computation with 57014, a gather over
// tessera.gather_limit is refused with 53400; after each the session
// answers again and nothing is left behind.
func TestGatherErrorsCancelAndLimit(t *testing.T) {
	conn := gatherSetup(t)
	_, err := countOf(t, conn, "SELECT count(*) / 0 FROM customers c JOIN gather_notes n ON n.name = c.name", pgx.QueryExecModeSimpleProtocol)
	if sqlstate(err) != "22012" {
		t.Fatalf("division by zero: %v, want 22012", err)
	}
	// 300 × 300 × 300 rows: seconds of work for the computing Postgres.
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	var n int64
	err = conn.QueryRow(ctx, "SELECT count(*) FROM customers a JOIN customers b ON a.name <> b.name JOIN customers c ON c.name <> a.name WHERE a."+gatherKeys+" AND b."+gatherKeys+" AND c."+gatherKeys, pgx.QueryExecModeSimpleProtocol).Scan(&n)
	if err == nil {
		t.Fatalf("the long gather was not cancelled (%d)", n)
	}
	t.Logf("cancelled: %v", err)
	if conn.IsClosed() {
		conn = connect(t, "store")
	}
	mustExec(t, conn, "SET tessera.gather_limit = '1kB'")
	if _, err := countOf(t, conn, gatherJoin, pgx.QueryExecModeSimpleProtocol); sqlstate(err) != "53400" {
		t.Fatalf("over tessera.gather_limit: %v, want 53400", err)
	}
	mustExec(t, conn, "RESET tessera.gather_limit")
	if n, err := countOf(t, conn, gatherJoin, pgx.QueryExecModeSimpleProtocol); err != nil || n != 300 {
		t.Fatalf("after the errors: %d, %v; want 300", n, err)
	}
	if tables, backends := leftBehind(t); tables != 0 || backends != 0 {
		t.Fatalf("left behind: %d temporary tables, %d backends in a gather's transaction", tables, backends)
	}
}

// TestGatherInTransactionsWithLocksAndDDL: a gather never waits forever
// for a lock the client's own transaction holds (55P03), and one in a
// transaction that ran DDL is refused (0A000); both leave nothing behind.
func TestGatherInTransactionsWithLocksAndDDL(t *testing.T) {
	conn := gatherSetup(t)
	ctx := context.Background()
	for _, c := range []struct{ first, code string }{
		{"LOCK TABLE gather_notes IN ACCESS EXCLUSIVE MODE", "55P03"},
		{"ALTER TABLE gather_notes ADD COLUMN extra int", "0A000"},
	} {
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := tx.Exec(ctx, c.first); err != nil {
			t.Fatal(c.first, err)
		}
		var n int64
		err = tx.QueryRow(ctx, gatherJoin).Scan(&n)
		if sqlstate(err) != c.code {
			t.Errorf("after %s: %v, want %s", c.first, err, c.code)
		}
		tx.Rollback(ctx)
	}
	if n, err := countOf(t, conn, gatherJoin, pgx.QueryExecModeSimpleProtocol); err != nil || n != 300 {
		t.Fatalf("afterwards: %d, %v; want 300", n, err)
	}
	if tables, backends := leftBehind(t); tables != 0 || backends != 0 {
		t.Fatalf("left behind: %d temporary tables, %d backends in a gather's transaction", tables, backends)
	}
}

// withoutGather runs sql with tessera.gather off, as the tests of the
// shards' and the engine's refusals expect, and returns its tag.
func withoutGather(t *testing.T, conn *pgx.Conn, sql string) (pgconn.CommandTag, error) {
	t.Helper()
	mustExec(t, conn, "SET tessera.gather = off")
	defer mustExec(t, conn, "RESET tessera.gather")
	return conn.Exec(context.Background(), sql)
}
