package router_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"
)

// hijacked is hijack with a deadline, for a protocol-level conversation.
func hijacked(t *testing.T, dsn string) *pgproto3.Frontend {
	t.Helper()
	conn, fe := hijack(t, dsn)
	conn.SetDeadline(time.Now().Add(time.Minute))
	return fe
}

// simpleAnswer sends sql as a simple-protocol Query and renders every
// message of the answer, up to and including ReadyForQuery, byte for byte.
func simpleAnswer(t *testing.T, fe *pgproto3.Frontend, sql string) string {
	t.Helper()
	fe.Send(&pgproto3.Query{String: sql})
	if err := fe.Flush(); err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for {
		msg, err := fe.Receive()
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		raw, err := msg.Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(&b, "%q\n", raw)
		if _, ok := msg.(*pgproto3.ReadyForQuery); ok {
			return b.String()
		}
	}
}

// TestAutoPreparedReadsAnswerAsWritten: reads the router runs as prepared
// statements answer exactly, byte for byte, as Postgres answers their
// text, past the point where Postgres switches to a generic plan, and
// errors keep their positions.
func TestAutoPreparedReadsAnswerAsWritten(t *testing.T) {
	conn := connect(t, "postgres")
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS ap_items (id int PRIMARY KEY, name text, price numeric, tags text[], big bigint)",
		"TRUNCATE ap_items",
		"INSERT INTO ap_items SELECT g, 'n' || g, g * 1.25, ARRAY['a', 't' || g], g::bigint << 33 FROM generate_series(1, 50) g",
		"INSERT INTO ap_items VALUES (51, 'it''s', 0, '{}', 0)",
	)
	routed, shard := hijacked(t, dsn("postgres")), hijacked(t, shardDSN(t, "shard-0", "postgres"))
	for _, sql := range []string{
		"SELECT * FROM ap_items WHERE id = 3",
		"select name, price from ap_items where name = 'it''s'",
		"SELECT id FROM ap_items WHERE id IN (4, 2, 9) ORDER BY id LIMIT 2 OFFSET 1",
		"SELECT id FROM ap_items WHERE price = 2.5",
		"SELECT id FROM ap_items WHERE tags = '{a,t7}'",
		"SELECT count(*) FROM ap_items WHERE 'n8' = name",
		"SELECT id FROM ap_items WHERE big = 8589934592",
		"SELECT id FROM ap_items WHERE id = 99999999999",
		"SELECT * FROM ap_items WHERE id = 'abc'",
		"SELECT * FROM ap_items WHERE price = 'x'",
		"SELECT * FROM ap_items WHERE id = 1 AND no_such_column = 2",
		"SELECT * FROM ap_items WHERE name = 'a\\b'",
		"SELECT * FROM ap_items",
	} {
		want := simpleAnswer(t, shard, sql)
		// Postgres plans a prepared statement afresh for its first five
		// runs, then may switch to a generic plan.
		for i := 0; i < 8; i++ {
			if got := simpleAnswer(t, routed, sql); got != want {
				t.Errorf("%s (run %d) through the router:\n%s\ndirectly:\n%s", sql, i+1, got, want)
				break
			}
		}
	}
}

// TestSimpleReadRunsPrepared: the text Postgres executes for a
// simple-protocol read is its prepared form, unless tessera.auto_prepare
// is off. The read is of a view that sleeps (the router cannot see that),
// so that pg_stat_activity shows it while it executes: a prepared form
// that failed and ran again as written would show the literal.
func TestSimpleReadRunsPrepared(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "postgres")
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS ap_sleepers (id int PRIMARY KEY)",
		"INSERT INTO ap_sleepers VALUES (42) ON CONFLICT DO NOTHING",
		"CREATE OR REPLACE FUNCTION ap_nap() RETURNS boolean LANGUAGE sql AS $$ SELECT true FROM pg_sleep(1) $$",
		"CREATE OR REPLACE VIEW ap_sleepy AS SELECT id FROM ap_sleepers WHERE ap_nap()",
	)
	shard := direct(t, "shard-0", "postgres")
	for _, tc := range []struct{ setting, want string }{
		{"on", "SELECT id FROM ap_sleepy WHERE id = $1"},
		{"off", "SELECT id FROM ap_sleepy WHERE id = 42"},
	} {
		if _, err := conn.Exec(ctx, "SET tessera.auto_prepare = "+tc.setting); err != nil {
			t.Fatal(err)
		}
		done := make(chan error, 1)
		go func() {
			_, err := conn.Exec(ctx, "SELECT id FROM ap_sleepy WHERE id = 42", pgx.QueryExecModeSimpleProtocol)
			done <- err
		}()
		var seen string
		deadline := time.Now().Add(10 * time.Second)
		for seen == "" && time.Now().Before(deadline) {
			err := shard.QueryRow(ctx, "SELECT query FROM pg_stat_activity WHERE state = 'active' AND query LIKE '%ap_sleepy WHERE%' AND pid <> pg_backend_pid()").Scan(&seen)
			if err != nil {
				time.Sleep(10 * time.Millisecond)
			}
		}
		if err := <-done; err != nil {
			t.Fatal(err)
		}
		if seen != tc.want {
			t.Errorf("auto_prepare %s: Postgres ran %q, want %q", tc.setting, seen, tc.want)
		}
	}
}
