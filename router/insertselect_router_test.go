package router_test

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"math/big"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
	"github.com/jackc/pgx/v5/pgtype"
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
	conn, ref := shardedTargetAndReference(t, "insel",
		"CREATE TABLE insel_target (customer_id bigint PRIMARY KEY, name text NOT NULL, amount int, note varchar(5), f float8)",
		"CREATE TABLE insel_src (id bigint, name text, amount numeric, note text, f float8)")

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
	snap, err := cluster.Store().GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	placement := snap.Topology.Resolve("store", "public", "customers")
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
	conn, ref = shardedTargetAndReference(t, "inselx",
		"CREATE TABLE inselx_target (customer_id bigint PRIMARY KEY, name text NOT NULL, amount numeric, at timestamptz, note varchar(5))",
		"CREATE TABLE inselx_src (id bigint, name text, amount numeric, at timestamptz)")
	const load = "INSERT INTO inselx_src SELECT 7760000 + i, 'n' || i, i * 1.25, timestamptz '2024-02-29 12:00:00.123456+00' + i * interval '1 hour 1 second' FROM generate_series(0, 29) i"
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

// In the extended protocol (pgx binding arguments, in each of its modes)
// the router runs such an INSERT ... SELECT too, with the client's
// parameters in text and in binary (int8, text, numeric, timestamptz,
// interval, NULL), RETURNING read in binary or text as the mode asks, a
// statement prepared once run again, errors, pipelined batches,
// transaction blocks, a SELECT of no row, and the simple protocol's
// limits. Each answer, and the tables afterwards, are those of one
// Postgres.
func TestInsertSelectExtendedThroughTheRouter(t *testing.T) {
	ctx := context.Background()
	conn, ref := inselxTables(t)
	at := time.Date(2025, 3, 30, 1, 30, 0, 654321000, time.UTC)
	amount := pgtype.Numeric{Int: big.NewInt(-12345), Exp: -3, Valid: true}
	for i, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeDescribeExec, pgx.QueryExecModeExec} {
		off := int64(i+1) * 1000
		type step struct {
			sql  string
			args []any
		}
		steps := []step{
			// Parameters in the SELECT list and its WHERE: int8, text,
			// numeric and timestamptz in binary, NULL, a numeric in text.
			{"INSERT INTO inselx_target (customer_id, name, amount, at, note) SELECT id + $1, name || $2, amount * $3, $4, $5 FROM inselx_src WHERE id < $6",
				[]any{off, " ünï'\\\\", amount, at, nil, int64(7760010)}},
			{"INSERT INTO inselx_target (customer_id, name, amount) SELECT id + $1, $2, amount + $3::numeric FROM inselx_src WHERE id BETWEEN $4 AND $5",
				[]any{off, "text numeric", "0.000000000000000000001", int64(7760010), int64(7760014)}},
			// RETURNING, read in binary by the modes that describe first.
			{"INSERT INTO inselx_target (customer_id, name, amount, at) SELECT id + $1, name, amount, at + $2 FROM inselx_src WHERE id BETWEEN 7760015 AND 7760019 RETURNING customer_id, amount, at, note, name",
				[]any{off, pgtype.Interval{Days: 1, Microseconds: 7, Valid: true}}},
			// The same statement again (prepared once where the mode
			// caches), with other values.
			{"INSERT INTO inselx_target (customer_id, name) SELECT id + $1, name FROM inselx_src WHERE id = $2 RETURNING customer_id",
				[]any{off, int64(7760020)}},
			{"INSERT INTO inselx_target (customer_id, name) SELECT id + $1, name FROM inselx_src WHERE id = $2 RETURNING customer_id",
				[]any{off, int64(7760021)}},
			// No row: RETURNING still describes its columns.
			{"INSERT INTO inselx_target (customer_id, name) SELECT id + $1, name FROM inselx_src WHERE id < $2 RETURNING customer_id, amount",
				[]any{off, int64(0)}},
			// Errors: too long for varchar(5), a duplicate key, the
			// SELECT's own; the session goes on.
			{"INSERT INTO inselx_target (customer_id, name, note) SELECT id + $1, name, $2 FROM inselx_src WHERE id > 7760025",
				[]any{off, "too long a note"}},
			{"INSERT INTO inselx_target (customer_id, name) SELECT id + $1, name FROM inselx_src WHERE id < 7760003",
				[]any{off}},
			{"INSERT INTO inselx_target (customer_id, name) SELECT id / $1, name FROM inselx_src",
				[]any{int64(0)}},
			{"INSERT INTO inselx_target (customer_id, name) SELECT id + $1, name FROM inselx_src WHERE id = 7760022 RETURNING customer_id",
				[]any{off}},
		}
		for _, s := range steps {
			got, want := extAnswer(conn, mode, s.sql, s.args...), extAnswer(ref, mode, s.sql, s.args...)
			if got != want {
				t.Errorf("%s %s %v\nthrough the router: %s\none Postgres:        %s", mode, s.sql, s.args, got, want)
			}
		}
		// Several in one pipelined batch, among other statements, one
		// reading what the one before it wrote; then a batch where one
		// fails, and those after it are skipped.
		if got, want := batchAnswer(t, conn, mode, off), batchAnswer(t, ref, mode, off); got != want {
			t.Errorf("%s: a batch\nthrough the router: %s\none Postgres:        %s", mode, got, want)
		}
		// Inside a transaction block: committed, then failed and rolled
		// back.
		for _, db := range []*pgx.Conn{conn, ref} {
			tx, err := db.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			var id int64
			if err := tx.QueryRow(ctx, "INSERT INTO inselx_target (customer_id, name) SELECT id + $1, name FROM inselx_src WHERE id = $2 RETURNING customer_id",
				mode, off, int64(7760023)).Scan(&id); err != nil || id != 7760023+off {
				t.Errorf("%s in a transaction: %d %v", mode, id, err)
			}
			var n int64
			if err := tx.QueryRow(ctx, "SELECT count(*) FROM inselx_target WHERE customer_id = $1", mode, 7760023+off).Scan(&n); err != nil || n != 1 {
				t.Errorf("%s: the row inserted in the transaction: %d %v", mode, n, err)
			}
			if err := tx.Commit(ctx); err != nil {
				t.Fatal(err)
			}
			tx, err = db.Begin(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO inselx_target (customer_id, name) SELECT id + $1, name FROM inselx_src WHERE id = $2", mode, off, int64(7760024)); err != nil {
				t.Errorf("%s in a transaction: %v", mode, err)
			}
			if _, err := tx.Exec(ctx, "INSERT INTO inselx_target (customer_id, name) SELECT id + $1, name FROM inselx_src WHERE id = $2", mode, off, int64(7760024)); sqlstate(err) != "23505" {
				t.Errorf("%s: a duplicate in a transaction: %v, want 23505", mode, err)
			}
			if _, err := tx.Exec(ctx, "SELECT 1", mode); sqlstate(err) != "25P02" {
				t.Errorf("%s: after an error in a transaction: %v, want 25P02", mode, err)
			}
			if err := tx.Rollback(ctx); err != nil {
				t.Fatal(err)
			}
		}
	}
	// The limits of the simple protocol's: rows held up to
	// tessera.gather_limit, floats with all their digits.
	mustExec(t, conn, "SET tessera.gather_limit = '200'")
	if _, err := conn.Exec(ctx, "INSERT INTO inselx_target (customer_id, name) SELECT id + $1, name FROM inselx_src", int64(9000)); sqlstate(err) != "54000" {
		t.Errorf("extended protocol past tessera.gather_limit: %v, want 54000", err)
	}
	mustExec(t, conn, "RESET tessera.gather_limit", "SET extra_float_digits = 0")
	if _, err := conn.Exec(ctx, "INSERT INTO inselx_target (customer_id, name) SELECT id + $1, name FROM inselx_src", int64(9000)); sqlstate(err) != "0A000" {
		t.Errorf("extended protocol with extra_float_digits 0: %v, want 0A000", err)
	}
	mustExec(t, conn, "RESET extra_float_digits")
	sameTables(t, conn, ref)
}

// extAnswer is what a statement with arguments answers in pgx's mode:
// its columns (names, types, formats), rows (sorted) and tag, or its
// SQLSTATE; then what the session answers next.
func extAnswer(conn *pgx.Conn, mode pgx.QueryExecMode, sql string, args ...any) string {
	ctx := context.Background()
	answer := func() string {
		rows, err := conn.Query(ctx, sql, append([]any{mode}, args...)...)
		if err == nil {
			var out [][]any
			out, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
			if err == nil {
				var fields []string
				for _, f := range rows.FieldDescriptions() {
					fields = append(fields, fmt.Sprintf("%s:%d:%d", f.Name, f.DataTypeOID, f.Format))
				}
				lines := make([]string, len(out))
				for i, r := range out {
					for j, v := range r {
						if tm, ok := v.(time.Time); ok {
							r[j] = tm.UTC().Format(time.RFC3339Nano)
						}
						if n, ok := v.(pgtype.Numeric); ok {
							f, _ := n.Value()
							r[j] = f
						}
					}
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
	}()
	var one int
	err := conn.QueryRow(ctx, "SELECT 1", mode).Scan(&one)
	return fmt.Sprintf("%s; then %d %v", answer, one, err)
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

// batchAnswer is what pgx batches of INSERT ... SELECTs among other
// statements answer, statement by statement, sent by a session of
// conn's in mode.
func batchAnswer(t *testing.T, conn *pgx.Conn, mode pgx.QueryExecMode, off int64) string {
	ctx := context.Background()
	cfg := conn.Config().Copy()
	cfg.DefaultQueryExecMode = mode
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var out []string
	run := func(b *pgx.Batch) {
		res := conn.SendBatch(ctx, b)
		for range b.QueuedQueries {
			rows, err := res.Query()
			var vals [][]any
			if err == nil {
				vals, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) ([]any, error) { return r.Values() })
			}
			var pe *pgconn.PgError
			switch {
			case errors.As(err, &pe):
				out = append(out, "ERROR "+pe.Code)
			case err != nil:
				out = append(out, err.Error())
			default:
				lines := make([]string, len(vals))
				for i, v := range vals {
					lines[i] = fmt.Sprint(v)
				}
				sort.Strings(lines)
				out = append(out, fmt.Sprintf("%v %s", lines, rows.CommandTag()))
			}
		}
		if err := res.Close(); err != nil {
			out = append(out, "close: "+err.Error())
		}
	}
	b := &pgx.Batch{}
	b.Queue("INSERT INTO inselx_target (customer_id, name) SELECT id + $1, name FROM inselx_src WHERE id BETWEEN $2 AND $3", off+100, int64(7760000), int64(7760004))
	b.Queue("SELECT count(*) FROM inselx_target WHERE customer_id > $1", off+100)
	b.Queue("INSERT INTO inselx_target (customer_id, name) SELECT customer_id + 50, name FROM inselx_target WHERE customer_id BETWEEN $1 AND $2 RETURNING customer_id", off+7760100, off+7760104)
	b.Queue("SELECT 1")
	run(b)
	b = &pgx.Batch{}
	b.Queue("SELECT count(*) FROM inselx_target WHERE customer_id > $1", off+100)
	b.Queue("INSERT INTO inselx_target (customer_id, name) SELECT id + $1, name FROM inselx_src WHERE id = 7760000", off+100)
	b.Queue("INSERT INTO inselx_target (customer_id, name) SELECT id + $1, name FROM inselx_src WHERE id = 7760000", off+200)
	run(b)
	var one int
	err = conn.QueryRow(ctx, "SELECT 1").Scan(&one)
	return fmt.Sprintf("%s; then %d %v", strings.Join(out, "; "), one, err)
}

// In the extended protocol the router answers the client's messages
// itself: each as Postgres answers it and in its place (Describe of the
// statement and of the portal, binary results for some columns, a
// statement bound twice in one batch), and an error where Postgres
// raises it (at Parse, at Bind, at Execute), the rest of the batch
// skipped.
func TestInsertSelectExtendedMessages(t *testing.T) {
	conn, ref := inselxTables(t)
	i8 := func(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
	const (
		insert = "INSERT INTO inselx_target (customer_id, name, amount) SELECT id + $1, name, amount FROM inselx_src WHERE id < $2 RETURNING customer_id, name, amount"
		noSuch = "INSERT INTO inselx_target (customer_id, name) SELECT id + $1, no_such_column FROM inselx_src"
		named  = "INSERT INTO inselx_target (customer_id, name) SELECT id + $1, coalesce($2, 'null') FROM inselx_src WHERE id = 7760009"
	)
	then := []pgproto3.FrontendMessage{&pgproto3.Parse{Query: "SELECT 1"}, &pgproto3.Bind{}, &pgproto3.Execute{}}
	batches := [][]pgproto3.FrontendMessage{
		{&pgproto3.Parse{Query: insert}, &pgproto3.Describe{ObjectType: 'S'},
			&pgproto3.Bind{ParameterFormatCodes: []int16{1}, Parameters: [][]byte{i8(5000), i8(7760003)}, ResultFormatCodes: []int16{1, 0, 1}},
			&pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Close{ObjectType: 'P'}},
		// A duplicate key: at Execute.
		append([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: insert},
			&pgproto3.Bind{Parameters: [][]byte{[]byte("5000"), []byte("7760001")}}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}}, then...),
		// A value binary int8 cannot read: at Bind.
		append([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: insert},
			&pgproto3.Bind{ParameterFormatCodes: []int16{1}, Parameters: [][]byte{{1, 2, 3}, i8(7760001)}}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}}, then...),
		// Result formats for more columns than RETURNING's: at Bind.
		append([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: insert},
			&pgproto3.Bind{Parameters: [][]byte{[]byte("6000"), []byte("7760001")}, ResultFormatCodes: []int16{1, 1}}, &pgproto3.Execute{}}, then...),
		// A column that does not exist: at Parse.
		append([]pgproto3.FrontendMessage{&pgproto3.Parse{Query: noSuch}, &pgproto3.Bind{Parameters: [][]byte{[]byte("1")}}, &pgproto3.Execute{}}, then...),
		// A statement of its own name, described, then bound twice in
		// one batch, without RETURNING.
		{&pgproto3.Parse{Name: "s", Query: named}, &pgproto3.Describe{ObjectType: 'S', Name: "s"}},
		{&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("7000"), []byte("seven")}}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{},
			&pgproto3.Bind{PreparedStatement: "s", ParameterFormatCodes: []int16{1, 0}, Parameters: [][]byte{i8(7001), nil}}, &pgproto3.Execute{},
			&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("7002"), []byte("two")}}, &pgproto3.Execute{}},
	}
	for _, batch := range batches {
		got, want := rawAnswer(t, conn, batch), rawAnswer(t, ref, batch)
		if got != want {
			t.Errorf("%s\nthrough the router: %s\none Postgres:        %s", rawBatch(batch), got, want)
		}
	}
	sameTables(t, conn, ref)
}

// rawAnswer sends batch and Sync on conn's connection and returns the
// answer up to ReadyForQuery: each message's type and what matters of
// it (table OIDs and column numbers differ between the databases; rows
// within one answer are sorted).
func rawAnswer(t *testing.T, conn *pgx.Conn, batch []pgproto3.FrontendMessage) string {
	t.Helper()
	fe := conn.PgConn().Frontend()
	for _, m := range batch {
		fe.Send(m)
	}
	fe.Send(&pgproto3.Sync{})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	var out, rows []string
	for {
		m, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		if r, ok := m.(*pgproto3.DataRow); ok {
			rows = append(rows, fmt.Sprintf("D%x", r.Values))
			continue
		}
		sort.Strings(rows)
		out, rows = append(out, rows...), nil
		switch m := m.(type) {
		case *pgproto3.ParameterDescription:
			out = append(out, fmt.Sprintf("t%v", m.ParameterOIDs))
		case *pgproto3.RowDescription:
			var fields []string
			for _, f := range m.Fields {
				fields = append(fields, fmt.Sprintf("%s:%d:%d", f.Name, f.DataTypeOID, f.Format))
			}
			out = append(out, fmt.Sprintf("T%v", fields))
		case *pgproto3.CommandComplete:
			out = append(out, "C "+string(m.CommandTag))
		case *pgproto3.ErrorResponse:
			out = append(out, "E "+m.Code)
		case *pgproto3.ReadyForQuery:
			return strings.Join(append(out, "Z"+string(m.TxStatus)), " ")
		default:
			out = append(out, fmt.Sprintf("%T", m))
		}
	}
}

// rawBatch names a batch's messages.
func rawBatch(batch []pgproto3.FrontendMessage) string {
	var names []string
	for _, m := range batch {
		names = append(names, fmt.Sprintf("%T", m))
	}
	return strings.Join(names, " ")
}

// shardedTargetAndReference makes prefix_target (target, its DDL) in the
// store database, placed in customer_data for the test, and prefix_src
// (source) unsharded, and both in prefix_reference, a plain database on
// shard-0's Postgres; it returns sessions of the router and of the
// reference. The topology and the tables are put back after the test.
func shardedTargetAndReference(t *testing.T, prefix, target, source string) (conn, ref *pgx.Conn) {
	t.Helper()
	snap, err := cluster.Store().GetTopology(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	base := snap.Topology
	drop := []string{"DROP TABLE IF EXISTS " + prefix + "_target", "DROP TABLE IF EXISTS " + prefix + "_src"}
	conn = connect(t, "store")
	mustExec(t, conn, append(drop, target, source)...)
	t.Cleanup(func() {
		applyTopology(t, base)
		mustExec(t, connect(t, "store"), drop...)
	})
	applyTopology(t, withTableInCustomerData(t, base, prefix+"_target"))
	mustExec(t, direct(t, "shard-0", "postgres"), "DROP DATABASE IF EXISTS "+prefix+"_reference", "CREATE DATABASE "+prefix+"_reference")
	ref = direct(t, "shard-0", prefix+"_reference")
	mustExec(t, ref, target, source)
	return conn, ref
}
