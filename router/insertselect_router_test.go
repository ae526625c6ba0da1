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
