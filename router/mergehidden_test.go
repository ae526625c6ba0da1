package router_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
)

// TestHiddenColumnsInEveryProtocol: a statement whose shards run SQL with
// hidden columns (avg's sum and count, count(DISTINCT x)'s x, a sort key
// not shown) answers exactly as one Postgres through the extended
// protocol with a Describe of the portal (pgconn's ExecParams) in every
// result-format layout a client may send (none, one for all, one per
// column): the RowDescription shows the statement's own columns with the
// formats asked for, and the rows are the same bytes. The simple and
// pgx's default protocols run the same shapes in the differential corpus.
func TestHiddenColumnsInEveryProtocol(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	fidelityRows(t, conn)
	ref := referenceDatabase(t)
	const orders = " FROM orders WHERE order_id BETWEEN 330000 AND 330099"
	for _, st := range []struct {
		sql     string
		columns int
	}{
		{"SELECT note, avg(qty), avg(total), count(DISTINCT customer_id)" + orders + " GROUP BY note ORDER BY note", 4},
		{"SELECT count(*), avg(total)" + orders + " GROUP BY qty ORDER BY qty DESC", 2},
		{"SELECT note, order_id" + orders + " ORDER BY total DESC, order_id LIMIT 7 OFFSET 2", 2},
		{"SELECT avg(qty)" + orders + " AND qty > 100", 1},
	} {
		perColumn := make([]int16, st.columns)
		for i := range perColumn {
			perColumn[i] = int16(1 - i%2)
		}
		for _, formats := range [][]int16{nil, {1}, {0}, perColumn} {
			want := execParams(ctx, ref.PgConn(), st.sql, formats)
			got := execParams(ctx, conn.PgConn(), st.sql, formats)
			if want.err != "" || len(want.rows) == 0 {
				t.Fatalf("reference: %s: %v", st.sql, want)
			}
			if got.String() != want.String() {
				t.Errorf("%s with result formats %v:\n got %s\nwant %s", st.sql, formats, got, want)
			}
		}
	}
}

// paramsAnswer is an extended-protocol answer as sent: the fields'
// names, types and formats, and each row's values as bytes.
type paramsAnswer struct {
	fields []string
	rows   []string
	err    string
}

func (a paramsAnswer) String() string {
	return fmt.Sprintf("fields %v rows %v err %q", a.fields, a.rows, a.err)
}

func execParams(ctx context.Context, c *pgconn.PgConn, sql string, formats []int16) paramsAnswer {
	var a paramsAnswer
	rr := c.ExecParams(ctx, sql, nil, nil, nil, formats)
	for _, f := range rr.FieldDescriptions() {
		a.fields = append(a.fields, fmt.Sprintf("%s:%d:%d:%d", f.Name, f.DataTypeOID, f.TypeModifier, f.Format))
	}
	for rr.NextRow() {
		a.rows = append(a.rows, fmt.Sprintf("%x", rr.Values()))
	}
	if _, err := rr.Close(); err != nil {
		a.err = err.Error()
	}
	return a
}

// TestTextOrderNeedsUTF8Client: text under C is ordered by the bytes the
// shards send, which are its UTF-8 bytes only when the client's encoding
// is UTF8: under another one such a statement is refused (0A000) rather
// than ordered by converted bytes, and answered again once it is back.
func TestTextOrderNeedsUTF8Client(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	fidelityRows(t, conn)
	ref := referenceDatabase(t)
	const sql = "SELECT name, customer_id FROM customers WHERE customer_id BETWEEN 330000 AND 330099 ORDER BY name DESC, customer_id LIMIT 4"
	mustExec(t, conn, "SET client_encoding = 'LATIN1'")
	if _, err := conn.Exec(ctx, sql); sqlstate(err) != "0A000" {
		t.Fatalf("under LATIN1: %v, want 0A000", err)
	}
	mustExec(t, conn, "RESET client_encoding")
	want := execParams(ctx, ref.PgConn(), sql, nil)
	got := execParams(ctx, conn.PgConn(), sql, nil)
	if len(want.rows) != 4 || got.String() != want.String() {
		t.Fatalf("under UTF8:\n got %s\nwant %s", got, want)
	}
}

// TestTextUnderOtherCollations: the engine orders text only under C and
// groups it only under a deterministic collation, as the catalog says
// (attcollation): a column under a nondeterministic ICU collation, whose
// equal values may differ in bytes ('a' = 'A'), is neither grouped nor
// ordered across shards (0A000), nor is one under a deterministic ICU
// collation ordered; the same statements over a column under the
// database's C collation are answered.
func TestTextUnderOtherCollations(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	fidelityRows(t, conn)
	mustExec(t, conn,
		"CREATE COLLATION IF NOT EXISTS s1_nocase (provider = icu, locale = 'und-u-ks-level2', deterministic = false)",
		"CREATE COLLATION IF NOT EXISTS s1_icu (provider = icu, locale = 'und')",
		"ALTER TABLE orders ADD COLUMN IF NOT EXISTS s1_nocase text COLLATE s1_nocase",
		"ALTER TABLE orders ADD COLUMN IF NOT EXISTS s1_icu text COLLATE s1_icu",
		"UPDATE orders SET s1_nocase = note, s1_icu = note WHERE order_id BETWEEN 330000 AND 330099")
	t.Cleanup(func() {
		conn.Exec(ctx, "ALTER TABLE orders DROP COLUMN IF EXISTS s1_nocase, DROP COLUMN IF EXISTS s1_icu")
	})
	const mine = " FROM orders WHERE order_id BETWEEN 330000 AND 330099"
	// The engine's refusals: gathering (Postgres computing over the
	// gathered rows) would answer some of them (gather_test.go).
	mustExec(t, conn, "SET tessera.gather = off")
	for _, c := range []struct {
		sql     string
		refused bool
	}{
		{"SELECT s1_nocase, count(*)" + mine + " GROUP BY s1_nocase", true},
		{"SELECT count(DISTINCT s1_nocase)" + mine, true},
		{"SELECT DISTINCT s1_nocase" + mine, true},
		{"SELECT s1_icu, count(*)" + mine + " GROUP BY s1_icu", false},
		{"SELECT s1_icu" + mine + " ORDER BY s1_icu LIMIT 3", true},
		{"SELECT min(s1_icu)" + mine, true},
		{"SELECT note" + mine + " ORDER BY note LIMIT 3", false},
		{"SELECT min(note), count(DISTINCT note)" + mine, false},
	} {
		_, err := conn.Exec(ctx, c.sql)
		if refused := sqlstate(err) == "0A000"; refused != c.refused || !refused && err != nil {
			t.Errorf("%s: %v, want refused %v", c.sql, err, c.refused)
		}
	}
}
