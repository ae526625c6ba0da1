package router_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// The engine streams: a merge's rows reach the client while the shards
// still send theirs, and a client that stops reading holds the shards
// back instead of filling the router's memory.

// checkMergeStreams reads the first row of an ORDER BY merged from both
// customer shards, then stops reading: each shard's Postgres must come to
// wait on writing its answer (wait_event ClientWrite), which it would not
// if the router gathered the answers whole. Then the whole answer must be
// Postgres's, in order.
func checkMergeStreams(t *testing.T, ref *pgx.Conn) {
	ctx := context.Background()
	const marker = "/* merge streams */"
	sql := fmt.Sprintf("SELECT order_id, customer_id, note %s FROM orders WHERE order_id >= %d ORDER BY order_id DESC, customer_id", marker, spillOrderBase)
	want := allRows(t, ref, sql)
	conn := connect(t, "store")
	rows, err := conn.Query(ctx, sql, pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	if !rows.Next() {
		t.Fatalf("no first row: %v", rows.Err())
	}
	for _, shard := range []string{"customer-shard-1", "customer-shard-2"} {
		sh := direct(t, shard, "store")
		deadline := time.Now().Add(30 * time.Second)
		for {
			var waiting int
			err := sh.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE wait_event = 'ClientWrite' AND query LIKE '%' || $1 || '%' AND pid <> pg_backend_pid()", marker).Scan(&waiting)
			if err != nil {
				t.Fatal(err)
			}
			if waiting > 0 {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s never waited to send its answer while the client held back: the router did not hold it back", shard)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	got := [][]string{}
	for ok := true; ok; ok = rows.Next() {
		var line []string
		for _, v := range rows.RawValues() {
			line = append(line, string(v))
		}
		got = append(got, line)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("%d rows, Postgres answers %d", len(got), len(want))
	}
	for i := range got {
		if fmt.Sprint(got[i]) != fmt.Sprint(want[i]) {
			t.Fatalf("row %d is %v, Postgres's is %v", i+1, got[i], want[i])
		}
	}
}

// checkErrorMidStream: a shard that fails after sending rows (a division
// by zero at one row of an index-ordered scan) gives the client
// Postgres's own error, and the session goes on. How many rows come
// before the error is not Postgres's to compare: the merge may see one
// shard's error before it can order any row (a driver drops those rows
// anyway), so the error may come first.
func checkErrorMidStream(t *testing.T, ref *pgx.Conn, n int64) {
	ctx := context.Background()
	sql := fmt.Sprintf("SELECT customer_id, order_id, 10 / (order_id - %d) FROM orders WHERE order_id >= %d ORDER BY customer_id, order_id",
		spillOrderBase+n/2, spillOrderBase)
	answer := func(conn *pgx.Conn) (int, *pgconn.PgError) {
		count := 0
		rows, err := conn.Query(ctx, sql, pgx.QueryExecModeSimpleProtocol)
		if err == nil {
			for rows.Next() {
				count++
			}
			err = rows.Err()
			rows.Close()
		}
		var pgErr *pgconn.PgError
		if !errors.As(err, &pgErr) {
			t.Fatalf("%s: got %v, want an error", sql, err)
		}
		return count, pgErr
	}
	wantRows, want := answer(ref)
	conn := connect(t, "store")
	gotRows, got := answer(conn)
	t.Logf("Postgres sent %d rows before its error, the router %d", wantRows, gotRows)
	if got.Code != want.Code || got.Message != want.Message {
		t.Fatalf("got %s %q, Postgres says %s %q", got.Code, got.Message, want.Code, want.Message)
	}
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("the session after the error: %v", err)
	}
}
