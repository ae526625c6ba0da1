package router_test

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// BenchmarkGatherJoin is a join the shards cannot answer alone (sharded
// customers with the unsharded gather_notes, on a column other than the
// shard key), grouped and ordered: through the router, which gathers the
// customers' rows into shard-0 and lets Postgres compute, and on one
// Postgres holding the same rows (database plain_reference on shard-0's
// instance), in the same run. TESSERA_GATHER_BENCH_ROWS sets the
// customers (default 20000). Run:
//
//	TESSERA_TEST_PORT_OFFSET=... go test -run '^$' -bench GatherJoin ./router
func BenchmarkGatherJoin(b *testing.B) {
	query := "SELECT n.name, count(*) FROM customers c JOIN gather_notes n ON n.name = c.name WHERE c.customer_id BETWEEN 7800000 AND 8799999 GROUP BY n.name ORDER BY 1"
	routed, plain, rows := benchCustomerDatabases(b)
	var want string
	for name, conn := range map[string]*pgx.Conn{"one_postgres": plain, "router_gather": routed} {
		b.Run(name, func(b *testing.B) {
			b.ReportMetric(float64(rows), "customers")
			for b.Loop() {
				got := answer(conn, query, pgx.QueryExecModeExec)
				if want == "" {
					want = got
				} else if got != want {
					b.Fatalf("answers differ:\n got %s\nwant %s", got, want)
				}
			}
		})
	}
}

// benchCustomerDatabases connects to the router's store database and to
// the plain reference, closed when b ends, and fills customers in both
// (TESSERA_GATHER_BENCH_ROWS of them, default 20000).
func benchCustomerDatabases(b *testing.B) (routed, plain *pgx.Conn, rows int) {
	rows = 20000
	if v, err := strconv.Atoi(os.Getenv("TESSERA_GATHER_BENCH_ROWS")); err == nil && v > 0 {
		rows = v
	}
	routed, err := pgx.Connect(context.Background(), dsn("store"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { routed.Close(context.Background()) })
	plain = plainReference(b)
	b.Cleanup(func() { plain.Close(context.Background()) })
	for _, conn := range []*pgx.Conn{routed, plain} {
		benchCustomers(b, conn, rows)
	}
	return routed, plain, rows
}

// benchCustomers fills customers with rows of ids from 7800000, named
// n0 to n12, and gather_notes with n0 to n9.
func benchCustomers(b *testing.B, conn *pgx.Conn, rows int) {
	ctx := context.Background()
	const keys = "customer_id BETWEEN 7800000 AND 8799999"
	for _, sql := range []string{
		"CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"CREATE TABLE IF NOT EXISTS gather_notes (id int PRIMARY KEY, name text)",
		"DELETE FROM customers WHERE " + keys,
		"DELETE FROM gather_notes",
		"INSERT INTO gather_notes SELECT g, 'n' || g FROM generate_series(0, 9) g",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			b.Fatal(sql, err)
		}
	}
	for start := 0; start < rows; start += 1000 {
		var values []string
		for g := start; g < min(rows, start+1000); g++ {
			values = append(values, fmt.Sprintf("(%d, 'n%d')", 7800000+g, g%13))
		}
		if _, err := conn.Exec(ctx, "INSERT INTO customers VALUES "+strings.Join(values, ", ")); err != nil {
			b.Fatal(err)
		}
	}
	conn.Exec(ctx, "ANALYZE customers")
}

// BenchmarkGatherLookupJoin is a batched-lookup join (gather_lookup.go):
// 200 rows of an unsharded table naming customers by their shard key,
// joined with the sharded customers. Through the router with the lookup
// (customers pulled by the 200 keys, from the shards owning them), the
// same join written so that no lookup applies (`r.cid + 0`: customers
// pulled whole), and on one Postgres holding the same rows, in the same
// run. TESSERA_GATHER_BENCH_ROWS sets the customers (default 20000):
//
//	TESSERA_TEST_PORT_OFFSET=... go test -run '^$' -bench GatherLookupJoin ./router
func BenchmarkGatherLookupJoin(b *testing.B) {
	ctx := context.Background()
	routed, plain, rows := benchCustomerDatabases(b)
	for _, conn := range []*pgx.Conn{routed, plain} {
		for _, sql := range []string{
			"CREATE TABLE IF NOT EXISTS lookup_bench_refs (id int PRIMARY KEY, cid bigint)",
			"DELETE FROM lookup_bench_refs",
			fmt.Sprintf("INSERT INTO lookup_bench_refs SELECT g, 7800000 + (g * 97) %% %d FROM generate_series(1, 200) g", rows),
			"ANALYZE lookup_bench_refs",
		} {
			if _, err := conn.Exec(ctx, sql); err != nil {
				b.Fatal(sql, err)
			}
		}
	}
	const join = "SELECT count(*), count(DISTINCT c.name) FROM lookup_bench_refs r JOIN customers c ON c.customer_id = "
	var want string
	for _, side := range []struct {
		name, sql string
		conn      *pgx.Conn
	}{
		{"one_postgres", join + "r.cid", plain},
		{"router_lookup", join + "r.cid", routed},
		{"router_gather_whole", join + "r.cid + 0", routed},
	} {
		b.Run(side.name, func(b *testing.B) {
			b.ReportMetric(float64(rows), "customers")
			for b.Loop() {
				got := answer(side.conn, side.sql, pgx.QueryExecModeExec)
				if want == "" {
					want = got
				} else if got != want {
					b.Fatalf("answers differ:\n got %s\nwant %s", got, want)
				}
			}
		})
	}
}

// plainReference connects to database plain_reference on shard-0's
// primary (plainPostgres, for benchmarks), creating it if needed.
func plainReference(b *testing.B) *pgx.Conn {
	ctx := context.Background()
	var port int
	for _, s := range cluster.Info().Shards {
		for _, in := range s.Instances {
			if s.UID == "shard-0" && in.Role == "primary" {
				port = in.Port
			}
		}
	}
	admin, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/postgres?sslmode=disable", port))
	if err != nil {
		b.Fatal(err)
	}
	defer admin.Close(ctx)
	var n int
	if err := admin.QueryRow(ctx, "SELECT count(*) FROM pg_database WHERE datname = 'plain_reference'").Scan(&n); err != nil {
		b.Fatal(err)
	}
	if n == 0 {
		if _, err := admin.Exec(ctx, "CREATE DATABASE plain_reference"); err != nil {
			b.Fatal(err)
		}
	}
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/plain_reference?sslmode=disable", port))
	if err != nil {
		b.Fatal(err)
	}
	return conn
}
