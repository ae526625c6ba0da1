package router_test

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// freeCustomers makes sure the store's customers table exists without
// rows from id lo to hi, now and when the test ends (TestShardedStore
// counts every row).
func freeCustomers(t *testing.T, lo, hi int64) {
	t.Helper()
	ctx := context.Background()
	conn := connect(t, "store")
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	free := func() error {
		_, err := conn.Exec(ctx, "DELETE FROM customers WHERE customer_id BETWEEN $1 AND $2", lo, hi)
		return err
	}
	if err := free(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := free(); err != nil {
			t.Errorf("removing customers %d to %d: %v", lo, hi, err)
		}
	})
}

// TestConcurrentClientsKeepTheirOwnAnswers: clients running at once,
// whose autocommit statements the sidecars pipeline on shared
// connections, each see only their own rows, errors, settings and
// transactions, in both protocols.
func TestConcurrentClientsKeepTheirOwnAnswers(t *testing.T) {
	ctx := context.Background()
	freeCustomers(t, 9000, 9999)
	const clients, rounds = 8, 25
	var wg sync.WaitGroup
	for i := 0; i < clients; i++ {
		conn := connect(t, "store")
		wg.Add(1)
		go func() {
			defer wg.Done()
			fail := func(format string, args ...any) { t.Errorf("client %d: "+format, append([]any{i}, args...)...) }
			app := fmt.Sprintf("client-%d", i)
			if _, err := conn.Exec(ctx, "SET application_name = '"+app+"'"); err != nil {
				fail("SET: %v", err)
				return
			}
			for r := 0; r < rounds; r++ {
				id := int64(9000 + i*100 + r)
				name := fmt.Sprintf("c%d-r%d", i, r)
				mode := pgx.QueryExecModeCacheStatement
				if r%2 == 1 {
					mode = pgx.QueryExecModeSimpleProtocol
				}
				if _, err := conn.Exec(ctx, "INSERT INTO customers (customer_id, name) VALUES ($1, $2)", mode, id, name); err != nil {
					fail("insert: %v", err)
					return
				}
				var got string
				if err := conn.QueryRow(ctx, "SELECT name FROM customers WHERE customer_id = $1", mode, id).Scan(&got); err != nil || got != name {
					fail("lookup of %d: %q, %v; want %q", id, got, err, name)
					return
				}
				if _, err := conn.Exec(ctx, "SELECT 1/0", mode); sqlstate(err) != "22012" {
					fail("division by zero: %v", err)
					return
				}
				if err := conn.QueryRow(ctx, "SHOW application_name", mode).Scan(&got); err != nil || got != app {
					fail("application_name %q, %v; want %q", got, err, app)
					return
				}
				// A transaction sees its own uncommitted row and loses it.
				tx, err := conn.Begin(ctx)
				if err != nil {
					fail("begin: %v", err)
					return
				}
				var n int
				_, err = tx.Exec(ctx, "DELETE FROM customers WHERE customer_id = $1", mode, id)
				if err == nil {
					err = tx.QueryRow(ctx, "SELECT count(*) FROM customers WHERE customer_id = $1", mode, id).Scan(&n)
				}
				tx.Rollback(ctx)
				if err != nil || n != 0 {
					fail("inside the transaction: %d rows, %v", n, err)
					return
				}
				if err := conn.QueryRow(ctx, "SELECT count(*) FROM customers WHERE customer_id = $1", mode, id).Scan(&n); err != nil || n != 1 {
					fail("after rollback: %d rows, %v; want 1", n, err)
					return
				}
			}
			// A string of several statements runs as one.
			id := 9000 + i*100
			res, err := conn.PgConn().Exec(ctx, fmt.Sprintf("DELETE FROM customers WHERE customer_id = %d; SELECT count(*) FROM customers WHERE customer_id = %d", id, id)).ReadAll()
			if err != nil || len(res) != 2 || res[0].CommandTag.RowsAffected() != 1 || len(res[1].Rows) != 1 || string(res[1].Rows[0][0]) != "0" {
				fail("multi-statement string: %v, %v", res, err)
			}
		}()
	}
	wg.Wait()
}

// TestBeginIsNotPipelined: a BEGIN, in a string of statements or alone
// through the extended protocol, keeps its backend for the statements
// after it, even when the connection's statements before it were
// pipelined.
func TestBeginIsNotPipelined(t *testing.T) {
	ctx := context.Background()
	freeCustomers(t, 8999, 8999)
	conn := connect(t, "store")
	for i := 0; i < 3; i++ {
		// The first takes a connection of its own; the next ones find it
		// just returned and share it.
		if _, err := conn.Exec(ctx, "SELECT name FROM customers WHERE customer_id = 8999"); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, "BEGIN; INSERT INTO customers (customer_id, name) VALUES (8999, 'open')", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("a string that begins a transaction: %v", err)
	}
	if _, err := conn.Exec(ctx, "COMMIT"); err != nil {
		t.Fatalf("commit: %v", err)
	}
	// The extended protocol's BEGIN goes to a shard in the client's batch.
	for _, sql := range []string{"BEGIN", "DELETE FROM customers WHERE customer_id = 8999", "COMMIT"} {
		if _, err := conn.PgConn().ExecParams(ctx, sql, nil, nil, nil, nil).Close(); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM customers WHERE customer_id = 8999").Scan(&n); err != nil || n != 0 {
		t.Fatalf("after the committed delete: %d rows, %v; want 0", n, err)
	}
}

// TestBatchWithAWriteIsNotPipelined: an extended-protocol batch whose
// first statement is a plain read but which goes on to write keeps a
// backend of its own, as a whole. A pipelined batch may run twice (when
// its answer is too large to hold, the sidecar runs it again on a
// connection of its own), so were this one pipelined by its first
// statement its UPDATE would apply twice.
func TestBatchWithAWriteIsNotPipelined(t *testing.T) {
	ctx := context.Background()
	freeCustomers(t, 8998, 8998)
	conn := connect(t, "store")
	if _, err := conn.Exec(ctx, "INSERT INTO customers (customer_id, name) VALUES (8998, 'a')"); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		// As in TestBeginIsNotPipelined: the reads leave a connection
		// just returned, which the next batch would share.
		if _, err := conn.Exec(ctx, "SELECT name FROM customers WHERE customer_id = 8998"); err != nil {
			t.Fatal(err)
		}
	}
	key := [][]byte{[]byte("8998")}
	batch := &pgconn.Batch{}
	// An answer over the 256 KB a shared connection holds.
	batch.ExecParams("SELECT repeat('x', 300000) FROM customers WHERE customer_id = $1", key, nil, nil, nil)
	batch.ExecParams("UPDATE customers SET name = name || '+' WHERE customer_id = $1", key, nil, nil, nil)
	results, err := conn.PgConn().ExecBatch(ctx, batch).ReadAll()
	if err != nil {
		t.Fatalf("a read and a write in one batch: %v", err)
	}
	if len(results) != 2 || len(results[0].Rows) != 1 || results[1].CommandTag.String() != "UPDATE 1" {
		t.Fatalf("batch: %d results; want a row of the read and UPDATE 1", len(results))
	}
	var name string
	if err := conn.QueryRow(ctx, "SELECT name FROM customers WHERE customer_id = 8998").Scan(&name); err != nil || name != "a+" {
		t.Fatalf("after the batch: %q, %v; want the update applied once (a+)", name, err)
	}
}

// TestReadCallingAWritingFunctionRunsOnce: a SELECT that calls a function
// the planner does not know (here one that writes) is not pipelined,
// since a pipelined statement may run twice: with an answer over the
// 256 KB a shared connection holds, the sidecar would run it again, and
// the function's UPDATE would apply twice.
func TestReadCallingAWritingFunctionRunsOnce(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS pipelined_bumps (n int)",
		"DELETE FROM pipelined_bumps",
		"INSERT INTO pipelined_bumps VALUES (0)",
		"CREATE OR REPLACE FUNCTION pipelined_bump() RETURNS text LANGUAGE sql AS $$ UPDATE pipelined_bumps SET n = n + 1 RETURNING repeat('x', 300000) $$",
	)
	t.Cleanup(func() {
		if _, err := conn.Exec(context.Background(), "DROP FUNCTION pipelined_bump(); DROP TABLE pipelined_bumps"); err != nil {
			t.Errorf("cleaning up: %v", err)
		}
	})
	var n int
	for i := 0; i < 3; i++ {
		// As in TestBeginIsNotPipelined: the reads leave a connection
		// just returned, which the next statement would share.
		if err := conn.QueryRow(ctx, "SELECT n FROM pipelined_bumps").Scan(&n); err != nil {
			t.Fatal(err)
		}
	}
	var bumped string
	if err := conn.QueryRow(ctx, "SELECT pipelined_bump()").Scan(&bumped); err != nil || len(bumped) != 300000 {
		t.Fatalf("the function's answer: %d bytes, %v", len(bumped), err)
	}
	if err := conn.QueryRow(ctx, "SELECT n FROM pipelined_bumps").Scan(&n); err != nil || n != 1 {
		t.Fatalf("after one call: n = %d, %v; want 1", n, err)
	}
}
