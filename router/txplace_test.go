package router_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Statements in a transaction that spans several shards go to the shards
// that own their tables, whatever the transaction touched first. Each
// script runs through the router (store database: customers sharded over
// customer-shard-1 and -2, everything else in the authoritative group on
// shard-0) and on one plain Postgres database holding the same tables,
// and every statement must answer alike.

// txScripts are run statement by statement. Customer 42 lives on
// customer-shard-1 and customer 1 on customer-shard-2.
var txScripts = map[string][]string{
	"write after a sharded write": {
		"BEGIN",
		"INSERT INTO customers VALUES (42, 'x')",
		"INSERT INTO tx_settings VALUES ('c', '3')",
		"INSERT INTO tx_settings VALUES ('d', '4')",
		"SELECT count(*) FROM tx_settings",
		"COMMIT",
		"SELECT k, v FROM tx_settings ORDER BY k",
	},
	"reads after a savepoint and DDL": {
		"INSERT INTO tx_settings VALUES ('a', '1'), ('b', '2')",
		"BEGIN",
		"SELECT name FROM customers WHERE customer_id = 1",
		"SAVEPOINT s1",
		"SELECT count(*) FROM tx_settings",
		"ALTER TABLE tx_settings SET (parallel_workers = 4)",
		"SET LOCAL parallel_setup_cost = 0",
		"SELECT count(*), max(v) FROM tx_settings",
		"SHOW parallel_setup_cost",
		"ROLLBACK TO s1",
		"SHOW parallel_setup_cost",
		"SELECT count(*) FROM tx_settings",
		"RELEASE s1",
		"COMMIT",
	},
	"savepoint before a shard joins": {
		"BEGIN",
		"SAVEPOINT s1",
		"INSERT INTO customers VALUES (42, 'y')",
		"INSERT INTO tx_settings VALUES ('e', '5')",
		"INSERT INTO customers VALUES (1, 'z')",
		"ROLLBACK TO SAVEPOINT s1",
		"SELECT count(*) FROM customers WHERE customer_id IN (1, 42)",
		"SELECT count(*) FROM tx_settings",
		"INSERT INTO tx_settings VALUES ('f', '6')",
		"COMMIT",
		"SELECT k, v FROM tx_settings ORDER BY k",
	},
	"a failed statement rolled back to a savepoint": {
		"INSERT INTO tx_settings VALUES ('a', '1')",
		"BEGIN",
		"INSERT INTO customers VALUES (42, 'w')",
		"SAVEPOINT s1",
		"INSERT INTO tx_settings VALUES ('a', 'again')",
		"SELECT 1",
		"ROLLBACK TO s1",
		"INSERT INTO tx_settings VALUES ('g', '7')",
		"SELECT count(*) FROM tx_settings",
		"COMMIT",
		"SELECT count(*) FROM customers WHERE customer_id = 42",
		"SELECT k, v FROM tx_settings ORDER BY k",
	},
	"SET LOCAL on every shard": {
		"BEGIN",
		"SELECT name FROM customers WHERE customer_id = 42",
		"SET LOCAL statement_timeout = '7s'",
		"SELECT current_setting('statement_timeout') FROM customers WHERE customer_id IN (1, 42) LIMIT 1",
		"SELECT current_setting('statement_timeout'), count(*) FROM tx_settings",
		"SELECT count(*), current_setting('statement_timeout') FROM customers WHERE customer_id = 1",
		"COMMIT",
		"SHOW statement_timeout",
	},
	"SET TRANSACTION on every shard": {
		"BEGIN",
		"SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
		"SELECT current_setting('transaction_isolation')",
		"SELECT current_setting('transaction_isolation'), count(*) FROM customers WHERE customer_id = 42",
		"SELECT current_setting('transaction_isolation'), count(*) FROM customers WHERE customer_id = 1",
		"COMMIT",
	},
	"SET on every shard of the transaction": {
		"BEGIN",
		"INSERT INTO customers VALUES (42, 't')",
		"INSERT INTO customers VALUES (1, 't')",
		"SET statement_timeout = '8s'",
		"SELECT current_setting('statement_timeout') FROM customers WHERE customer_id = 1",
		"SELECT current_setting('statement_timeout') FROM customers WHERE customer_id = 42",
		"RESET statement_timeout",
		"SELECT current_setting('statement_timeout') FROM customers WHERE customer_id = 1",
		"COMMIT",
		"SHOW statement_timeout",
	},
	"a cursor on another shard than the transaction's first": {
		"INSERT INTO customers VALUES (42, 'c'), (1, 'd')",
		"BEGIN",
		"INSERT INTO tx_settings VALUES ('c', '3')",
		"DECLARE cur CURSOR FOR SELECT name FROM customers WHERE customer_id = 42",
		"DECLARE cur2 CURSOR FOR SELECT name FROM customers WHERE customer_id = 1",
		"FETCH 1 FROM cur",
		"FETCH 1 FROM cur2",
		"MOVE BACKWARD 1 IN cur",
		"FETCH NEXT FROM cur",
		"CLOSE cur",
		"FETCH 1 FROM cur",
		"COMMIT",
	},
	"sequences and functions run where unsharded data lives": {
		"BEGIN",
		"INSERT INTO customers VALUES (42, 'v')",
		"SELECT nextval('tx_seq')",
		"SELECT nextval('tx_seq'), 1 + 1",
		"SELECT txid_current() = txid_current()",
		"COMMIT",
		"SELECT nextval('tx_seq')",
	},
	"a failed multi-shard transaction does not commit": {
		"BEGIN",
		"INSERT INTO customers VALUES (42, 'u')",
		"INSERT INTO tx_settings VALUES ('h', '8')",
		"INSERT INTO customers VALUES (1, 'u')",
		"INSERT INTO tx_settings VALUES ('h', 'dup')",
		"COMMIT",
		"SELECT count(*) FROM customers WHERE customer_id IN (1, 42)",
		"SELECT count(*) FROM tx_settings",
	},
}

// txReset gives both databases the same starting state.
var txReset = []string{
	"CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
	"DELETE FROM customers WHERE customer_id IN (1, 42)",
	"DROP TABLE IF EXISTS tx_settings",
	"CREATE TABLE tx_settings (k text PRIMARY KEY, v text)",
	"DROP SEQUENCE IF EXISTS tx_seq",
	"CREATE SEQUENCE tx_seq",
}

// forgetCustomers deletes, when the test ends, the customers these tests
// insert, which the package's other tests do not expect to find.
func forgetCustomers(t *testing.T) {
	t.Cleanup(func() {
		conn, err := pgx.Connect(context.Background(), dsn("store"))
		if err != nil {
			t.Error(err)
			return
		}
		defer conn.Close(context.Background())
		if _, err := conn.Exec(context.Background(), "DELETE FROM customers WHERE customer_id IN (1, 42)"); err != nil {
			t.Error(err)
		}
	})
}

// plainPostgres is a database on shard-0's Postgres, reached directly:
// one Postgres that holds every table.
func plainPostgres(t *testing.T) *pgx.Conn {
	t.Helper()
	ctx := context.Background()
	admin := direct(t, "shard-0", "postgres")
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = 'plain_reference'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		mustExec(t, admin, "CREATE DATABASE plain_reference")
	}
	return direct(t, "shard-0", "plain_reference")
}

// answer runs one statement and describes its answer: the rows, or the
// error's SQLSTATE.
func answer(conn *pgx.Conn, sql string, mode pgx.QueryExecMode) string {
	rows, err := conn.Query(context.Background(), sql, mode)
	var out []string
	if err == nil {
		for rows.Next() {
			vals, _ := rows.Values()
			out = append(out, fmt.Sprint(vals))
		}
		rows.Close()
		err = rows.Err()
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			return "ERROR " + pgErr.Code
		}
		return "ERROR " + err.Error()
	}
	return strings.Join(out, "; ")
}

func TestTransactionStatementsFollowTheirTables(t *testing.T) {
	forgetCustomers(t)
	modes := map[string]pgx.QueryExecMode{"simple": pgx.QueryExecModeSimpleProtocol, "extended": pgx.QueryExecModeExec}
	for name, script := range txScripts {
		for modeName, mode := range modes {
			t.Run(name+"/"+modeName, func(t *testing.T) {
				// Fresh sessions: a script that fails leaves nothing behind.
				ref, conn := plainPostgres(t), connect(t, "store")
				mustExec(t, ref, txReset...)
				mustExec(t, conn, txReset...)
				for _, sql := range script {
					want, got := answer(ref, sql, mode), answer(conn, sql, mode)
					if got != want {
						t.Errorf("%s\n  router:   %s\n  Postgres: %s", sql, got, want)
					}
				}
				checkSettingsPlacement(t)
			})
		}
	}
}

// checkSettingsPlacement: the unsharded table's rows are on shard-0 only.
func checkSettingsPlacement(t *testing.T) {
	t.Helper()
	for _, shard := range []string{"customer-shard-1", "customer-shard-2"} {
		var n int
		if err := direct(t, shard, "store").QueryRow(context.Background(), "SELECT count(*) FROM tx_settings").Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n != 0 {
			t.Errorf("%s holds %d rows of the unsharded table tx_settings", shard, n)
		}
	}
}

// TestTransactionBatchFollowsItsTables: the same in one extended-protocol
// batch (one Sync), where transaction control is placed when it runs.
func TestTransactionBatchFollowsItsTables(t *testing.T) {
	forgetCustomers(t)
	ctx := context.Background()
	ref := plainPostgres(t)
	conn := connect(t, "store")
	script := []string{
		"BEGIN",
		"INSERT INTO customers VALUES (42, 'x')",
		"INSERT INTO tx_settings VALUES ('c', '3')",
		"SAVEPOINT s1",
		"INSERT INTO customers VALUES (1, 'y')",
		"INSERT INTO tx_settings VALUES ('d', '4')",
		"ROLLBACK TO s1",
		"SET LOCAL statement_timeout = '9s'",
		"SELECT count(*), current_setting('statement_timeout') FROM customers WHERE customer_id = 1",
		"SELECT count(*), current_setting('statement_timeout') FROM tx_settings",
		"COMMIT",
		"SELECT count(*) FROM customers WHERE customer_id IN (1, 42)",
	}
	run := func(c *pgx.Conn) []string {
		mustExec(t, c, txReset...)
		b := &pgx.Batch{}
		for _, sql := range script {
			b.Queue(sql)
		}
		br := c.SendBatch(ctx, b)
		var out []string
		for range script {
			rows, err := br.Query()
			var vals []string
			if err == nil {
				for rows.Next() {
					v, _ := rows.Values()
					vals = append(vals, fmt.Sprint(v))
				}
				rows.Close()
				err = rows.Err()
			}
			if err != nil {
				vals = []string{"ERROR " + err.Error()}
			}
			out = append(out, strings.Join(vals, "; "))
		}
		if err := br.Close(); err != nil {
			t.Fatal(err)
		}
		out = append(out, answer(c, "SELECT k, v FROM tx_settings ORDER BY k", pgx.QueryExecModeSimpleProtocol))
		out = append(out, answer(c, "SELECT count(*) FROM customers WHERE customer_id IN (1, 42)", pgx.QueryExecModeSimpleProtocol))
		return out
	}
	want, got := run(ref), run(conn)
	for i := range want {
		if got[i] != want[i] {
			what := "after the batch"
			if i < len(script) {
				what = script[i]
			}
			t.Errorf("%s\n  router:   %s\n  Postgres: %s", what, got[i], want[i])
		}
	}
	checkSettingsPlacement(t)
	if s := conn.PgConn().TxStatus(); s != 'I' {
		t.Errorf("after COMMIT the router reports transaction status %q", s)
	}
}

// TestQueryStringsAnswerAsPostgres: a simple-protocol string of several
// statements runs whole on one shard when its statements allow, so that
// Postgres applies its implicit-transaction rules; split over shards, it
// stops at its first error, as Postgres does.
func TestQueryStringsAnswerAsPostgres(t *testing.T) {
	forgetCustomers(t)
	strs := []string{
		"SELECT 1; VACUUM",
		"SELECT 1; COMMIT; VACUUM",
		"SELECT 1; SAVEPOINT sp",
		"ROLLBACK TO SAVEPOINT sp; SELECT 2",
		"SELECT 2; RELEASE SAVEPOINT sp; SELECT 3",
		"SELECT 1; BEGIN; SAVEPOINT sp; ROLLBACK TO SAVEPOINT sp; COMMIT",
		"SET TRANSACTION READ ONLY; COMMIT AND CHAIN",
		"SHOW transaction_read_only",
		"SELECT 1/0; INSERT INTO customers VALUES (1, 'y')",
		"SELECT count(*) FROM customers WHERE customer_id = 1",
	}
	ref, conn := plainPostgres(t), connect(t, "store")
	mustExec(t, ref, txReset...)
	mustExec(t, conn, txReset...)
	for _, sql := range strs {
		want, got := answerAll(ref, sql), answerAll(conn, sql)
		if got != want {
			t.Errorf("%s\n  router:   %s\n  Postgres: %s", sql, got, want)
		}
	}
}

// answerAll runs a query string and describes every result in it.
func answerAll(conn *pgx.Conn, sql string) string {
	results, err := conn.PgConn().Exec(context.Background(), sql).ReadAll()
	var out []string
	for _, r := range results {
		out = append(out, fmt.Sprint(r.CommandTag.String(), r.Rows))
	}
	if err != nil {
		var pgErr *pgconn.PgError
		if errors.As(err, &pgErr) {
			out = append(out, "ERROR "+pgErr.Code)
		} else {
			out = append(out, "ERROR "+err.Error())
		}
	}
	return strings.Join(out, "; ")
}
