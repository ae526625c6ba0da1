package router_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// INSERT ... SELECT that the shards cannot run themselves (from an
// unsharded table, from another table not colocated, through an
// aggregate) is run by the router: each statement answers what one
// Postgres holding all the rows answers (rows returned, tag, SQLSTATE),
// and the tables hold the same rows afterwards, each on the shard its
// key routes to. The reference is a plain database on shard-0's
// Postgres with the same tables.
func TestInsertSelectThroughTheRouter(t *testing.T) {
	ctx := context.Background()
	snap, err := cluster.Store().GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := snap.Topology
	conn := connect(t, "store")
	const (
		target = "CREATE TABLE insel_target (customer_id bigint PRIMARY KEY, name text NOT NULL, amount int, note varchar(5), f float8)"
		source = "CREATE TABLE insel_src (id bigint, name text, amount numeric, note text, f float8)"
	)
	mustExec(t, conn, "DROP TABLE IF EXISTS insel_target", "DROP TABLE IF EXISTS insel_src", target, source)
	t.Cleanup(func() {
		applyTopology(t, base)
		mustExec(t, connect(t, "store"), "DROP TABLE IF EXISTS insel_target", "DROP TABLE IF EXISTS insel_src")
	})
	applyTopology(t, withTableInCustomerData(t, base, "insel_target"))
	admin := direct(t, "shard-0", "postgres")
	mustExec(t, admin, "DROP DATABASE IF EXISTS insel_reference", "CREATE DATABASE insel_reference")
	ref := direct(t, "shard-0", "insel_reference")
	mustExec(t, ref, target, source)

	var rows []string
	for i := range 40 {
		name := fmt.Sprintf("'n%d'", i)
		switch i % 5 {
		case 1:
			name = `'it''s a \ back\slash'`
		case 2:
			name = "'ünïcødé\ttab'"
		}
		note := "NULL"
		if i%3 == 0 {
			note = fmt.Sprintf("'%s'", strings.Repeat("x", 1+i%4))
		}
		rows = append(rows, fmt.Sprintf("(%d, %s, %d.5, %s, %s)", 7750000+i, name, i, note, []string{"0.1", "1e-300", "-0", "NULL", "3.141592653589793"}[i%5]))
	}
	load := "INSERT INTO insel_src VALUES " + strings.Join(rows, ", ")
	mustExec(t, conn, load)
	mustExec(t, ref, load)

	steps := []string{
		// From an unsharded table, numeric into int (rounded), the
		// float8 values exactly.
		"INSERT INTO insel_target (customer_id, name, amount, note, f) SELECT id, name, amount, note, f FROM insel_src WHERE id < 7750020",
		// RETURNING, and from the target itself (read before any row is
		// written), not colocated (the key is computed).
		"INSERT INTO insel_target (customer_id, name) SELECT customer_id + 100, upper(name) FROM insel_target WHERE customer_id < 7750010 RETURNING customer_id, name, amount",
		// An aggregate across shards as the source.
		"INSERT INTO insel_target (customer_id, name, amount) SELECT 7750500, 'total', sum(amount) FROM insel_target",
		// A WITH clause on the INSERT.
		"WITH s AS (SELECT id, name FROM insel_src WHERE id BETWEEN 7750020 AND 7750029) INSERT INTO insel_target (customer_id, name) SELECT id, name FROM s",
		// Into an unsharded table, from the sharded one.
		"INSERT INTO insel_src (id, name, f) SELECT customer_id + 9000, name, f FROM insel_target WHERE customer_id < 7750010 RETURNING id, name",
		// No row: RETURNING still describes its columns.
		"INSERT INTO insel_target (customer_id, name) SELECT id, name FROM insel_src WHERE false RETURNING customer_id",
		"INSERT INTO insel_target (customer_id, name) SELECT id, name FROM insel_src WHERE false",
		// Errors: the SELECT's own, a value too long for varchar(5)
		// (the assignment cast's 22001), NOT NULL, a duplicate key on
		// one shard; none leaves a row behind.
		"INSERT INTO insel_target (customer_id, name) SELECT id / 0, name FROM insel_src",
		"INSERT INTO insel_target (customer_id, name, note) SELECT id + 1000, name, 'too long a note' FROM insel_src WHERE id > 7750030",
		"INSERT INTO insel_target (customer_id, name) SELECT id + 2000, NULL FROM insel_src WHERE id > 7750030",
		"INSERT INTO insel_target (customer_id, name) SELECT id + 3000 - (id % 2) * 3000, name FROM insel_src WHERE id > 7750030",
	}
	for _, sql := range steps {
		got, want := insertAnswer(t, conn, sql), insertAnswer(t, ref, sql)
		if got != want {
			t.Errorf("%s\nthrough the router: %s\none Postgres:        %s", sql, got, want)
		}
	}
	// In a transaction rolled back, nothing stays.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "INSERT INTO insel_target (customer_id, name) SELECT id + 5000, name FROM insel_src", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	for _, all := range []string{"SELECT customer_id, name, amount, note, f FROM insel_target ORDER BY customer_id",
		"SELECT id, name, amount, note, f FROM insel_src ORDER BY id"} {
		if got, want := fmt.Sprint(allRows(t, conn, all)), fmt.Sprint(allRows(t, ref, all)); got != want {
			t.Fatalf("%s through the router:\n%v\none Postgres:\n%v", all, got, want)
		}
	}
	// Each row on the shard its key routes to.
	placement := base.Resolve("store", "public", "customers")
	total := 0
	for _, shard := range []string{"shard-0", "customer-shard-1", "customer-shard-2"} {
		for _, id := range int64Column(t, direct(t, shard, "store"), "SELECT customer_id FROM insel_target") {
			if _, want, err := placement.RouteInt(id); err != nil || want != shard {
				t.Errorf("customer %d on %s, routed to %s (%v)", id, shard, want, err)
			}
			total++
		}
	}
	if total == 0 {
		t.Fatal("no rows stored")
	}
	// Rows held by the router are bounded by tessera.gather_limit: past
	// it 54000, and nothing moved or inserted.
	before := fmt.Sprint(allRows(t, conn, "SELECT customer_id, name FROM insel_target ORDER BY customer_id"))
	mustExec(t, conn, "SET tessera.gather_limit = '200'")
	if _, err := conn.Exec(ctx, "INSERT INTO insel_target (customer_id, name) SELECT id + 8000, name FROM insel_src", pgx.QueryExecModeSimpleProtocol); sqlstate(err) != "54000" {
		t.Errorf("INSERT ... SELECT past tessera.gather_limit: %v, want 54000", err)
	}
	if _, err := conn.Exec(ctx, "UPDATE insel_target SET customer_id = customer_id + 8000", pgx.QueryExecModeSimpleProtocol); sqlstate(err) != "54000" {
		t.Errorf("a shard-key UPDATE past tessera.gather_limit: %v, want 54000", err)
	}
	mustExec(t, conn, "RESET tessera.gather_limit")
	if after := fmt.Sprint(allRows(t, conn, "SELECT customer_id, name FROM insel_target ORDER BY customer_id")); after != before {
		t.Errorf("rows changed by statements refused past the limit:\n%s\nwas\n%s", after, before)
	}
	// Floats written with fewer digits than they hold would change on
	// the way: refused.
	mustExec(t, conn, "SET extra_float_digits = 0")
	if _, err := conn.Exec(ctx, "INSERT INTO insel_target (customer_id, name, f) SELECT id + 7000, name, f FROM insel_src", pgx.QueryExecModeSimpleProtocol); sqlstate(err) != "0A000" {
		t.Errorf("extra_float_digits 0: %v, want 0A000", err)
	}
	if _, err := conn.Exec(ctx, "UPDATE insel_target SET customer_id = customer_id + 7000 WHERE customer_id = 7750001", pgx.QueryExecModeSimpleProtocol); sqlstate(err) != "0A000" {
		t.Errorf("a shard-key UPDATE under extra_float_digits 0: %v, want 0A000", err)
	}
	mustExec(t, conn, "RESET extra_float_digits")
	// The extended protocol keeps the refusal.
	if _, err := conn.Exec(ctx, "INSERT INTO insel_target (customer_id, name) SELECT id + 6000, name FROM insel_src WHERE id = $1", pgx.QueryExecModeExec, 7750001); sqlstate(err) != "0A000" {
		t.Errorf("extended protocol: %v, want 0A000", err)
	}
}

// insertAnswer is what a statement answers in the simple protocol: its
// columns, rows (sorted) and tag, or its SQLSTATE.
func insertAnswer(t *testing.T, conn *pgx.Conn, sql string) string {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql, pgx.QueryExecModeSimpleProtocol)
	if err == nil {
		var out [][]any
		out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
		if err == nil {
			var fields []string
			for _, f := range rows.FieldDescriptions() {
				fields = append(fields, f.Name)
			}
			// Without ORDER BY the SELECT's rows, and so RETURNING's,
			// come in no defined order: compared as a multiset.
			lines := make([]string, len(out))
			for i, r := range out {
				lines[i] = fmt.Sprint(r)
			}
			sort.Strings(lines)
			return fmt.Sprintf("%v %v %s", fields, lines, rows.CommandTag())
		}
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return "ERROR " + pe.Code
	}
	return err.Error()
}

func int64Column(t *testing.T, conn *pgx.Conn, sql string) []int64 {
	t.Helper()
	rows, err := conn.Query(context.Background(), sql)
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// inselxTables makes the tables of the tests below, through the router
// (the target sharded, the source unsharded) and in a plain database on
// shard-0's Postgres, the reference; it returns sessions of both.
func inselxTables(t *testing.T) (conn, ref *pgx.Conn) {
	t.Helper()
	ctx := context.Background()
	snap, err := cluster.Store().GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := snap.Topology
	conn = connect(t, "store")
	const (
		target = "CREATE TABLE inselx_target (customer_id bigint PRIMARY KEY, name text NOT NULL, amount numeric, at timestamptz, note varchar(5))"
		source = "CREATE TABLE inselx_src (id bigint, name text, amount numeric, at timestamptz)"
		load   = "INSERT INTO inselx_src SELECT 7760000 + i, 'n' || i, i * 1.25, timestamptz '2024-02-29 12:00:00.123456+00' + i * interval '1 hour 1 second' FROM generate_series(0, 29) i"
	)
	mustExec(t, conn, "DROP TABLE IF EXISTS inselx_target", "DROP TABLE IF EXISTS inselx_src", target, source)
	t.Cleanup(func() {
		applyTopology(t, base)
		mustExec(t, connect(t, "store"), "DROP TABLE IF EXISTS inselx_target", "DROP TABLE IF EXISTS inselx_src")
	})
	applyTopology(t, withTableInCustomerData(t, base, "inselx_target"))
	admin := direct(t, "shard-0", "postgres")
	mustExec(t, admin, "DROP DATABASE IF EXISTS inselx_reference", "CREATE DATABASE inselx_reference")
	ref = direct(t, "shard-0", "inselx_reference")
	mustExec(t, ref, target, source)
	mustExec(t, conn, load)
	mustExec(t, ref, load)
	return conn, ref
}

// sameTables fails the test unless the router's tables hold the rows
// the reference's do.
func sameTables(t *testing.T, conn, ref *pgx.Conn) {
	t.Helper()
	for _, all := range []string{"SELECT customer_id, name, amount, at, note FROM inselx_target ORDER BY customer_id",
		"SELECT id, name, amount, at FROM inselx_src ORDER BY id"} {
		if got, want := fmt.Sprint(allRows(t, conn, all)), fmt.Sprint(allRows(t, ref, all)); got != want {
			t.Fatalf("%s through the router:\n%v\none Postgres:\n%v", all, got, want)
		}
	}
}

// In a string of several statements (the simple protocol) the router
// runs such an INSERT ... SELECT in its turn: its SELECT sees what the
// statements before it wrote, and its failure undoes the string, as
// Postgres's implicit transaction does; in a transaction block too. Each
// answer, and the tables afterwards, are those of one Postgres.
func TestInsertSelectInAString(t *testing.T) {
	conn, ref := inselxTables(t)
	for _, sql := range []string{
		// The SELECT reads what the string's first statement wrote.
		"INSERT INTO inselx_src (id, name) VALUES (7769001, 'multi'), (7769002, 'string'); INSERT INTO inselx_target (customer_id, name) SELECT id, name FROM inselx_src WHERE id > 7769000 RETURNING customer_id, name",
		"INSERT INTO inselx_target (customer_id, name) VALUES (7769101, 'a'), (7769102, 'b'); INSERT INTO inselx_target (customer_id, name) SELECT customer_id + 100, upper(name) FROM inselx_target WHERE customer_id BETWEEN 7769101 AND 7769102; SELECT count(*) FROM inselx_target WHERE customer_id > 7769100",
		"INSERT INTO inselx_target (customer_id, name) SELECT id, name FROM inselx_src WHERE false RETURNING customer_id; SELECT 1",
		// A failure undoes the statements before it, and stops the
		// string: the assignment cast's, a duplicate key, the SELECT's.
		"INSERT INTO inselx_src (id, name) VALUES (7769301, 'gone'); INSERT INTO inselx_target (customer_id, name, note) SELECT id, name, 'too long a note' FROM inselx_src WHERE id = 7769301; INSERT INTO inselx_src (id) VALUES (7769302)",
		"INSERT INTO inselx_target (customer_id, name) VALUES (7769401, 'gone'); INSERT INTO inselx_target (customer_id, name) SELECT customer_id * 1, name FROM inselx_target WHERE customer_id = 7769401",
		"INSERT INTO inselx_src (id, name) VALUES (7769501, 'gone'); INSERT INTO inselx_target (customer_id, name) SELECT id / 0, name FROM inselx_src; SELECT 1",
		// In a transaction block the string opens, or the session's.
		"BEGIN; INSERT INTO inselx_src (id, name) VALUES (7769601, 'kept'); INSERT INTO inselx_target (customer_id, name) SELECT id, name FROM inselx_src WHERE id = 7769601 RETURNING customer_id; COMMIT",
		"BEGIN",
		"INSERT INTO inselx_src (id, name) VALUES (7769701, 'tx'); INSERT INTO inselx_target (customer_id, name) SELECT id, name FROM inselx_src WHERE id = 7769701",
		"INSERT INTO inselx_target (customer_id, name) SELECT id + 1, name FROM inselx_src WHERE id = 7769701; SELECT count(*) FROM inselx_target WHERE customer_id > 7769700",
		"COMMIT",
		"BEGIN",
		"INSERT INTO inselx_src (id, name) VALUES (7769801, 'rolled back'); INSERT INTO inselx_target (customer_id, name) SELECT id, name FROM inselx_src WHERE id = 7769801",
		"INSERT INTO inselx_target (customer_id, name) SELECT id, name FROM inselx_src WHERE id = 7769801; SELECT 1",
		"SELECT 1",
		"COMMIT",
	} {
		got, want := multiAnswer(conn, sql), multiAnswer(ref, sql)
		if got != want {
			t.Errorf("%s\nthrough the router: %s\none Postgres:        %s", sql, got, want)
		}
	}
	sameTables(t, conn, ref)
}

// multiAnswer is what a Query string answers, result by result.
func multiAnswer(conn *pgx.Conn, sql string) string {
	results, err := conn.PgConn().Exec(context.Background(), sql).ReadAll()
	var out []string
	for _, r := range results {
		var fields []string
		for _, f := range r.FieldDescriptions {
			fields = append(fields, f.Name)
		}
		var lines []string
		for _, row := range r.Rows {
			var vals []string
			for _, v := range row {
				vals = append(vals, string(v))
			}
			lines = append(lines, strings.Join(vals, "|"))
		}
		sort.Strings(lines)
		out = append(out, fmt.Sprintf("%v %v %s", fields, lines, r.CommandTag))
	}
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		out = append(out, "ERROR "+pe.Code)
	} else if err != nil {
		out = append(out, err.Error())
	}
	return strings.Join(out, "; ")
}
