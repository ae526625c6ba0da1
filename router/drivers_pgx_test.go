package router_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
)

// driverDatabase makes a database through the router and the same on
// shard-0 directly, for a driver's answers to be compared with Postgres's.
func driverDatabase(t *testing.T, name string) (viaRouter, viaPostgres string) {
	t.Helper()
	ctx := context.Background()
	r := connect(t, "postgres")
	r.Exec(ctx, "DROP DATABASE IF EXISTS "+name)
	mustExec(t, r, "CREATE DATABASE "+name)
	d := direct(t, "shard-0", "postgres")
	d.Exec(ctx, "DROP DATABASE IF EXISTS "+name+"_direct")
	if _, err := d.Exec(ctx, "CREATE DATABASE "+name+"_direct"); err != nil {
		t.Fatal(err)
	}
	return dsn(name), shardDSN(t, "shard-0", name+"_direct")
}

// bothWays runs f against the router and against Postgres directly.
func bothWays(t *testing.T, db string, f func(t *testing.T, conn *pgx.Conn)) {
	viaRouter, viaPostgres := driverDatabase(t, db)
	for _, c := range []struct{ name, dsn string }{{"postgres", viaPostgres}, {"router", viaRouter}} {
		t.Run(c.name, func(t *testing.T) {
			conn, err := pgx.Connect(context.Background(), c.dsn)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close(context.Background())
			f(t, conn)
		})
	}
}

// TestPgxPreparesAgainAfterDeallocate: DEALLOCATE, DEALLOCATE ALL,
// DISCARD ALL and a protocol Close forget the session's statements, so
// that preparing the same name again works (issue #19).
func TestPgxPreparesAgainAfterDeallocate(t *testing.T) {
	bothWays(t, "pgx_dealloc", func(t *testing.T, conn *pgx.Conn) {
		ctx := context.Background()
		prepare := func(step string) {
			t.Helper()
			if _, err := conn.Prepare(ctx, "s1", "SELECT $1::int + 1"); err != nil {
				t.Fatalf("%s: %v", step, err)
			}
			var n int
			if err := conn.QueryRow(ctx, "s1", 41).Scan(&n); err != nil || n != 42 {
				t.Fatalf("%s: %d, %v", step, n, err)
			}
		}
		prepare("first")
		if err := conn.DeallocateAll(ctx); err != nil {
			t.Fatal(err)
		}
		prepare("after DEALLOCATE ALL")
		if err := conn.Deallocate(ctx, "s1"); err != nil {
			t.Fatal(err)
		}
		prepare("after Close")
		// SQL-level, which pgx does not see: its own cache still has s1,
		// so the name is given to the server by a raw Parse.
		for _, sql := range []string{"DEALLOCATE s1", "DEALLOCATE ALL", "DISCARD ALL", "DEALLOCATE PREPARE s1"} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				t.Fatalf("%s: %v", sql, err)
			}
			if _, err := conn.PgConn().Prepare(ctx, "s1", "SELECT $1::int + 1", nil); err != nil {
				t.Fatalf("Parse after %s: %v", sql, err)
			}
		}
		// The unnamed statement, bound in a later batch than its Parse
		// (pgx's describe-exec mode), runs on the shard by a content
		// name: after DEALLOCATE ALL the shard has it no more.
		describeExec := func(step string) {
			t.Helper()
			var n int
			if err := conn.QueryRow(ctx, "SELECT $1::int * 2", pgx.QueryExecModeDescribeExec, 21).Scan(&n); err != nil || n != 42 {
				t.Fatalf("%s: %d, %v", step, n, err)
			}
		}
		describeExec("before DEALLOCATE ALL")
		mustExec(t, conn, "DEALLOCATE ALL")
		describeExec("after DEALLOCATE ALL")
	})
}

// TestPgxRecoversWhenAResultTypeChanges: after ALTER TABLE changes the
// result type of a statement pgx has cached, the next query fails with
// 0A000 as on Postgres, and pgx, which then prepares it again, recovers
// (issue #19).
func TestPgxRecoversWhenAResultTypeChanges(t *testing.T) {
	bothWays(t, "pgx_alter", func(t *testing.T, conn *pgx.Conn) {
		ctx := context.Background()
		mustExec(t, conn, "DROP TABLE IF EXISTS widgets", "CREATE TABLE widgets (id int PRIMARY KEY, name text)",
			"INSERT INTO widgets VALUES (1, 'one')")
		read := func() (string, error) {
			var name string
			err := conn.QueryRow(ctx, "SELECT * FROM widgets WHERE id = $1", 1).Scan(new(int), &name)
			return name, err
		}
		for i := 0; i < 3; i++ {
			if _, err := read(); err != nil {
				t.Fatal(err)
			}
		}
		mustExec(t, conn, "ALTER TABLE widgets ADD COLUMN extra int")
		_, err := read()
		if sqlstate(err) != "0A000" {
			t.Fatalf("first read after ALTER: %v, want 0A000", err)
		}
		for i := 0; i < 3; i++ {
			var id, extra *int
			var name string
			if err := conn.QueryRow(ctx, "SELECT * FROM widgets WHERE id = $1", 1).Scan(&id, &name, &extra); err != nil || name != "one" {
				t.Fatalf("read %d after recovery: %q, %v", i, name, err)
			}
		}
	})
}

// TestPgxNewSessionAfterResultTypeChange: a session that prepares a
// statement after DDL changed its result type gets the new columns, as on
// one Postgres, though another session's statement of the same text,
// prepared before the change, is still on the pooled backends (statements
// on the shards are named with the schema epoch their client prepared
// them in); that other session gets Postgres's 0A000 once, as it would on
// one Postgres.
func TestPgxNewSessionAfterResultTypeChange(t *testing.T) {
	viaRouter, viaPostgres := driverDatabase(t, "pgx_alter_new")
	for _, c := range []struct{ name, dsn string }{{"postgres", viaPostgres}, {"router", viaRouter}} {
		t.Run(c.name, func(t *testing.T) {
			ctx := context.Background()
			connect := func() *pgx.Conn {
				conn, err := pgx.Connect(ctx, c.dsn)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { conn.Close(context.Background()) })
				return conn
			}
			old := connect()
			mustExec(t, old, "DROP TABLE IF EXISTS gadgets", "CREATE TABLE gadgets (id int PRIMARY KEY, name text)",
				"INSERT INTO gadgets VALUES (1, 'one')")
			const read = "SELECT * FROM gadgets WHERE id = $1"
			for range 3 {
				if err := old.QueryRow(ctx, read, 1).Scan(new(int), new(string)); err != nil {
					t.Fatal(err)
				}
			}
			mustExec(t, old, "ALTER TABLE gadgets ADD COLUMN extra int")
			for i := range 3 {
				var extra *int
				var name string
				if err := connect().QueryRow(ctx, read, 1).Scan(new(int), &name, &extra); err != nil || name != "one" {
					t.Fatalf("a new session's read %d after the change: %q, %v", i, name, err)
				}
			}
			if err := old.QueryRow(ctx, read, 1).Scan(new(int), new(string)); sqlstate(err) != "0A000" {
				t.Fatalf("the old session's first read after the change: %v, want 0A000", err)
			}
		})
	}
}
