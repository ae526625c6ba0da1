package copysplit_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"
)

func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

// TestCopyIntoShardsMatchesPostgres: COPY FROM STDIN through the router
// into a table sharded over four shards stores, for a key of every type
// the topology shards by and in text, CSV (with a header) and binary
// (pgx's CopyFrom), the rows one Postgres stores, each on the shard its
// key routes to, with the same row count in the command tag. Values hold
// NULLs, empty strings, quotes, delimiters, backslashes, \N and \. as
// data, embedded newlines and carriage returns, unicode and 240 kB
// values. It fails if a row lands on a shard its key does not route to.
func TestCopyIntoShardsMatchesPostgres(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	for _, kind := range keyKinds {
		e.create(t, kind.table, fmt.Sprintf(columnsDDL, kind.sqlType))
		n := 100
		if kind.table == "k_int8" {
			n = 1000
		}
		for _, format := range copyFormats {
			for _, c := range []*pgx.Conn{e.router, e.ref} {
				if _, err := c.Exec(ctx, "TRUNCATE "+kind.table); err != nil {
					t.Fatal(err)
				}
			}
			got, err := copyRows(ctx, e.router, kind.table, kind, format, 0, n)
			if err != nil {
				t.Fatalf("%s %s through the router: %v", kind.table, format, err)
			}
			want, err := copyRows(ctx, e.ref, kind.table, kind, format, 0, n)
			if err != nil {
				t.Fatalf("%s %s into Postgres: %v", kind.table, format, err)
			}
			if got != want {
				t.Errorf("%s %s: COPY %d, Postgres COPY %d", kind.table, format, got, want)
			}
			e.sameRows(t, kind.table, kind.sqlType)
		}
	}
}

// TestCopyIntoLarge: many rows in every format, fingerprinted rather than
// compared row by row. CI copies 5000 rows per format;
// TESSERA_COPY_ROWS=2000000 is issue #17's acceptance run.
func TestCopyIntoLarge(t *testing.T) {
	n := 5000
	if s := os.Getenv("TESSERA_COPY_ROWS"); s != "" {
		v, err := strconv.Atoi(s)
		if err != nil {
			t.Fatal(err)
		}
		n = v
	}
	e := newEnv(t)
	ctx := context.Background()
	kind := keyKinds[0]
	e.create(t, "large", fmt.Sprintf(columnsDDL, kind.sqlType))
	for _, format := range copyFormats {
		for _, c := range []*pgx.Conn{e.router, e.ref} {
			if _, err := c.Exec(ctx, "TRUNCATE large"); err != nil {
				t.Fatal(err)
			}
		}
		got, err := copyRows(ctx, e.router, "large", kind, format, 0, n)
		if err != nil || got != int64(n) {
			t.Fatalf("%s through the router: COPY %d, %v", format, got, err)
		}
		if _, err := copyRows(ctx, e.ref, "large", kind, format, 0, n); err != nil {
			t.Fatal(err)
		}
		want := column(t, e.ref, fingerprintSQL)[0]
		if !sameFingerprint(t, e, want) {
			t.Fatalf("%s: the shards' rows differ from Postgres's (%s)", format, want)
		}
		t.Logf("%s: %d rows, fingerprint %s", format, n, want)
	}
}

// fingerprintSQL is a multiset fingerprint of table large: its row count
// and the sum of a 60-bit hash of each row.
const fingerprintSQL = "SELECT count(*)::text || '/' || coalesce(sum(('x' || substr(md5(t::text), 1, 15))::bit(60)::bigint::numeric), 0)::text FROM large t"

// sameFingerprint adds the shards' fingerprints in Postgres (numeric) and
// compares with the reference.
func sameFingerprint(t *testing.T, e *env, want string) bool {
	t.Helper()
	var parts []string
	for _, c := range e.shards {
		parts = append(parts, "'"+strings.Replace(column(t, c, fingerprintSQL)[0], "/", ",", 1)+"'")
	}
	var got string
	err := e.ref.QueryRow(context.Background(),
		"SELECT sum(split_part(p, ',', 1)::bigint)::text || '/' || sum(split_part(p, ',', 2)::numeric)::text FROM unnest(ARRAY["+strings.Join(parts, ",")+"]) p").Scan(&got)
	if err != nil {
		t.Fatal(err)
	}
	return got == want
}

// TestCopyIntoFailureLeavesNothing: a COPY that fails on one shard (a
// constraint, bad data, malformed input, in any format) fails with the
// SQLSTATE one Postgres gives, and no shard keeps any of its rows.
func TestCopyIntoFailureLeavesNothing(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.create(t, "strict", "k bigint PRIMARY KEY, n int CHECK (n >= 0), v text")
	var good strings.Builder
	for i := range 400 {
		fmt.Fprintf(&good, "%d\t%d\tv%d\n", i, i, i)
	}
	cases := []struct {
		name, sql, data string
	}{
		{"check violation", "COPY strict FROM STDIN", good.String() + "1000\t-1\tbad\n"},
		{"duplicate key", "COPY strict FROM STDIN", good.String() + "7\t7\tagain\n"},
		{"invalid value", "COPY strict FROM STDIN", good.String() + "1001\tabc\tx\n"},
		{"invalid key", "COPY strict FROM STDIN", good.String() + "abc\t1\tx\n"},
		{"missing column", "COPY strict FROM STDIN", good.String() + "1002\t1\n"},
		{"missing key field", "COPY strict (v, n, k) FROM STDIN", "a\t1\t5\nb\n"},
		{"extra column", "COPY strict FROM STDIN", good.String() + "1003\t1\tx\ty\n"},
		{"null key", "COPY strict FROM STDIN", good.String() + "\\N\t1\tx\n"},
		{"unterminated CSV quote", "COPY strict FROM STDIN (FORMAT csv)", "1,1,a\n2,2,\"open\n"},
		{"bad binary signature", "COPY strict FROM STDIN (FORMAT binary)", "PGCOPY\nnot really"},
		{"invalid UTF-8 in key column", "COPY strict (v, n, k) FROM STDIN", "\\xff\t1\t1\n"},
	}
	for _, c := range cases {
		_, wantErr := copyText(ctx, e.ref, c.sql, c.data)
		_, err := copyText(ctx, e.router, c.sql, c.data)
		if wantErr == nil {
			t.Fatalf("%s: Postgres accepted the data", c.name)
		}
		if sqlstate(err) != sqlstate(wantErr) {
			t.Errorf("%s: got %v, want SQLSTATE %s (%v)", c.name, err, sqlstate(wantErr), wantErr)
		}
		for s, rows := range e.stored(t, "strict") {
			if len(rows) != 0 {
				t.Errorf("%s: shard %s kept %d rows", c.name, s, len(rows))
			}
		}
	}
	// An end marker after data on a line: Postgres stores the data
	// before it as a last row, which the splitter cannot place; the
	// router refuses the COPY rather than guess.
	if _, err := copyText(ctx, e.router, "COPY strict FROM STDIN", good.String()+"1004\t1\tx\\.\n"); sqlstate(err) != "0A000" {
		t.Errorf("end marker after data: %v, want 0A000", err)
	}
	for s, rows := range e.stored(t, "strict") {
		if len(rows) != 0 {
			t.Errorf("end marker after data: shard %s kept %d rows", s, len(rows))
		}
	}
	// The router still serves the connection.
	if n, err := copyText(ctx, e.router, "COPY strict FROM STDIN", good.String()); err != nil || n != 400 {
		t.Fatalf("COPY after the failures: %d, %v", n, err)
	}
}

// TestCopyIntoNullOrMissingKey: a NULL key in a nullable key column,
// which one Postgres would store but no shard can be chosen for, fails
// with 23502 as a split INSERT does; a key column left out of the column
// list, or a client_encoding other than UTF8, is refused with 0A000
// before any row.
func TestCopyIntoNullOrMissingKey(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.create(t, "loose", "k bigint, v text")
	for _, data := range []string{"1\ta\n\\N\tb\n", "1,a\n,b\n"} {
		sql := "COPY loose FROM STDIN"
		if strings.Contains(data, ",") {
			sql += " (FORMAT csv)"
		}
		if _, err := copyText(ctx, e.router, sql, data); sqlstate(err) != "23502" || !strings.Contains(err.Error(), "shard key") {
			t.Errorf("%q: %v, want 23502 (shard key)", data, err)
		}
	}
	if _, err := copyText(ctx, e.router, "COPY loose (v) FROM STDIN", "a\n"); sqlstate(err) != "0A000" {
		t.Errorf("COPY without the key column: %v, want 0A000", err)
	}
	// Postgres converts other client encodings before reading the key.
	if _, err := e.router.Exec(ctx, "SET client_encoding = 'LATIN1'"); err != nil {
		t.Fatal(err)
	}
	if _, err := copyText(ctx, e.router, "COPY loose FROM STDIN", "1\ta\n"); sqlstate(err) != "0A000" {
		t.Errorf("COPY under client_encoding LATIN1: %v, want 0A000", err)
	}
	if _, err := e.router.Exec(ctx, "RESET client_encoding"); err != nil {
		t.Fatal(err)
	}
	for s, rows := range e.stored(t, "loose") {
		if len(rows) != 0 {
			t.Errorf("shard %s kept %d rows", s, len(rows))
		}
	}
}

// TestCopyIntoTransaction: a COPY in the client's transaction is part of
// it: its rows are visible to the transaction, gone after ROLLBACK, all
// there after COMMIT; a failed COPY fails the transaction.
func TestCopyIntoTransaction(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	e.create(t, "txcopy", "k bigint PRIMARY KEY, v text")
	var data strings.Builder
	for i := range 300 {
		fmt.Fprintf(&data, "%d\tv%d\n", i, i)
	}
	count := func() int {
		total := 0
		for _, rows := range e.stored(t, "txcopy") {
			total += len(rows)
		}
		return total
	}
	mustExec := func(sql string) {
		t.Helper()
		if _, err := e.router.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	mustExec("BEGIN")
	if n, err := copyText(ctx, e.router, "COPY txcopy FROM STDIN", data.String()); err != nil || n != 300 {
		t.Fatalf("COPY in a transaction: %d, %v", n, err)
	}
	var seen int
	if err := e.router.QueryRow(ctx, "SELECT count(*) FROM txcopy").Scan(&seen); err != nil || seen != 300 {
		t.Fatalf("count in the transaction: %d, %v", seen, err)
	}
	if count() != 0 {
		t.Fatal("rows visible outside the transaction before COMMIT")
	}
	mustExec("ROLLBACK")
	if n := count(); n != 0 {
		t.Fatalf("after ROLLBACK the shards hold %d rows", n)
	}
	mustExec("BEGIN")
	if _, err := copyText(ctx, e.router, "COPY txcopy FROM STDIN", data.String()); err != nil {
		t.Fatal(err)
	}
	mustExec("COMMIT")
	if n := count(); n != 300 {
		t.Fatalf("after COMMIT the shards hold %d rows, want 300", n)
	}
	mustExec("BEGIN")
	if _, err := copyText(ctx, e.router, "COPY txcopy FROM STDIN", "5\tdup\n"); sqlstate(err) != "23505" {
		t.Fatalf("duplicate in a transaction: %v, want 23505", err)
	}
	if _, err := e.router.Exec(ctx, "SELECT 1"); sqlstate(err) != "25P02" {
		t.Fatalf("after a failed COPY: %v, want 25P02", err)
	}
	mustExec("ROLLBACK")
}

// TestCopyIntoExtendedProtocol: a COPY started with Parse, Bind,
// Describe and Execute answers as Postgres does (ParseComplete,
// BindComplete, NoData, CopyInResponse; CommandComplete and
// ReadyForQuery at the Sync after CopyDone) and stores the rows.
func TestCopyIntoExtendedProtocol(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	kind := keyKinds[3] // text keys
	e.create(t, "ext", fmt.Sprintf(columnsDDL, kind.sqlType))
	var data strings.Builder
	for i := range 500 {
		data.WriteString(genRow(kind, i).text())
	}
	if _, err := copyText(ctx, e.ref, "COPY ext (k, v, n, b) FROM STDIN", data.String()); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, routerDSN("bulk"))
	if err != nil {
		t.Fatal(err)
	}
	hj, err := conn.PgConn().Hijack()
	if err != nil {
		t.Fatal(err)
	}
	defer hj.Conn.Close()
	fe := hj.Frontend
	fe.Send(&pgproto3.Parse{Query: "COPY ext (k, v, n, b) FROM STDIN"})
	fe.Send(&pgproto3.Bind{})
	fe.Send(&pgproto3.Describe{ObjectType: 'P'})
	fe.Send(&pgproto3.Execute{})
	fe.Send(&pgproto3.Sync{})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	var got []string
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, fmt.Sprintf("%T", msg))
		if _, ok := msg.(*pgproto3.CopyInResponse); ok {
			break
		}
		if em, ok := msg.(*pgproto3.ErrorResponse); ok {
			t.Fatalf("error: %+v", em)
		}
	}
	if want := "[*pgproto3.ParseComplete *pgproto3.BindComplete *pgproto3.NoData *pgproto3.CopyInResponse]"; fmt.Sprint(got) != want {
		t.Fatalf("before the data: %v, want %s", got, want)
	}
	// Chunks that cut rows anywhere, as a client may.
	body := data.String()
	for at := 0; at < len(body); at += 1000 {
		fe.Send(&pgproto3.CopyData{Data: []byte(body[at:min(at+1000, len(body))])})
	}
	fe.Send(&pgproto3.CopyDone{})
	fe.Send(&pgproto3.Sync{})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	got = got[:0]
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatal(err)
		}
		switch m := msg.(type) {
		case *pgproto3.CommandComplete:
			got = append(got, string(m.CommandTag))
		case *pgproto3.ReadyForQuery:
			got = append(got, "Z"+string(m.TxStatus))
		case *pgproto3.ErrorResponse:
			t.Fatalf("error: %+v", m)
		default:
			got = append(got, fmt.Sprintf("%T", msg))
		}
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			break
		}
	}
	if fmt.Sprint(got) != "[COPY 500 ZI]" {
		t.Fatalf("after the data: %v, want [COPY 500 ZI]", got)
	}
	e.sameRows(t, "ext", kind.sqlType)
}
