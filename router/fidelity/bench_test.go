package fidelity

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/dev"
)

// BenchmarkEngine compares reads the router's engine merges across the 4
// shards of the differential topology with the same reads on one
// Postgres holding all the rows (a database on shard-0's Postgres), in
// the same run: an ORDER BY … LIMIT 100, a GROUP BY of 1000 groups, a
// whole ORDER BY merge of every row, and a join of items with events
// colocated on k (rows, then grouped); and, for the first, the same
// statement sent straight to the four shards at once, the floor the
// machine's cores set. Run:
//
//	TESSERA_TEST_PORT_OFFSET=... go test -run '^$' -bench Engine ./router/fidelity
//
// ns/op is per statement; rows/s of "merge_all" is rows merged per
// second. TESSERA_BENCH_ROWS sets the rows per shard (default 50000).
func BenchmarkEngine(b *testing.B) {
	perShard := 50000
	if v := os.Getenv("TESSERA_BENCH_ROWS"); v != "" {
		fmt.Sscan(v, &perShard)
	}
	base, err := os.MkdirTemp("", "engine-bench-")
	if err != nil {
		b.Fatal(err)
	}
	defer os.RemoveAll(base)
	os.Chmod(base, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	cluster, err := dev.Start(ctx, dev.Config{
		DataDir: filepath.Join(base, "data"), Shards: 1, NoReplicas: true,
		TopologyFile: "../../testdata/topologies/differential.json",
		BasePort:     dev.TestPort(29733), EtcdPort: -1, RouterPort: -1,
	})
	if err != nil {
		b.Fatal(err)
	}
	defer cluster.Stop(context.Background())
	connect := func(addr, db string) *pgx.Conn {
		conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@%s/%s?sslmode=disable", addr, db))
		if err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() { conn.Close(context.Background()) })
		return conn
	}
	exec := func(conn *pgx.Conn, sqls ...string) {
		for _, sql := range sqls {
			if _, err := conn.Exec(ctx, sql); err != nil {
				b.Fatalf("%s: %v", sql, err)
			}
		}
	}
	primaries := map[string]string{}
	for _, s := range cluster.Info().Shards {
		for _, in := range s.Instances {
			if in.Role == "primary" {
				primaries[s.UID] = fmt.Sprintf("127.0.0.1:%d", in.Port)
			}
		}
	}
	tables := []string{"CREATE TABLE items (k bigint, grp int, note text)", "CREATE TABLE events (k bigint, seq int, amount int)"}
	exec(connect(cluster.Info().Router, "postgres"), "CREATE DATABASE diff")
	router := connect(cluster.Info().Router, "diff")
	exec(router, tables...)
	exec(connect(primaries["shard-0"], "postgres"), "CREATE DATABASE benchref")
	ref := connect(primaries["shard-0"], "benchref")
	exec(ref, tables...)
	for i := range 4 {
		// Each shard's rows, put there directly (a scatter read does not
		// care where the hash would put them; events, colocated with
		// items on k, go with the items of their k), and into the
		// reference.
		insert := []string{
			fmt.Sprintf("INSERT INTO items SELECT g * 4 + %d, g %% 1000, md5(g::text) FROM generate_series(0, %d) g", i, perShard-1),
			fmt.Sprintf("INSERT INTO events SELECT g * 4 + %d, s, g %% 97 + s FROM generate_series(0, %d) g, generate_series(1, 2) s", i, perShard-1),
		}
		sh := connect(primaries[fmt.Sprintf("shard-%d", i)], "diff")
		exec(sh, insert...)
		exec(sh, "CREATE INDEX ON items (k)", "CREATE INDEX ON events (k)", "ANALYZE items", "ANALYZE events")
		exec(ref, insert...)
	}
	exec(ref, "CREATE INDEX ON items (k)", "CREATE INDEX ON events (k)", "ANALYZE items", "ANALYZE events")
	// The floor the machine sets: the same statement sent straight to
	// the four shards' Postgres at once (each its own connection), every
	// answer read whole, with no router or sidecar between; merging is
	// left out, so this is what four shards' work costs on these cores.
	var shards []*pgx.Conn
	for i := range 4 {
		shards = append(shards, connect(primaries[fmt.Sprintf("shard-%d", i)], "diff"))
	}
	b.Run("order_by_limit_100/four_shards_direct", func(b *testing.B) {
		rows := 0
		for b.Loop() {
			counts := make([]int, len(shards))
			var wg sync.WaitGroup
			for i, conn := range shards {
				wg.Add(1)
				go func() {
					defer wg.Done()
					r, err := conn.Query(ctx, "SELECT k, grp, note FROM items ORDER BY k LIMIT 100")
					if err != nil {
						b.Error(err)
						return
					}
					for r.Next() {
						counts[i]++
					}
					if err := r.Err(); err != nil {
						b.Error(err)
					}
				}()
			}
			wg.Wait()
			for _, n := range counts {
				rows += n
			}
		}
		b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
	})
	for _, q := range []struct{ name, sql string }{
		{"order_by_limit_100", "SELECT k, grp, note FROM items ORDER BY k LIMIT 100"},
		{"group_by", "SELECT grp, count(*), sum(k), max(k) FROM items GROUP BY grp"},
		{"merge_all", "SELECT k, grp FROM items ORDER BY k"},
		// Colocated on k: each shard joins its own rows.
		{"colocated_join", "SELECT i.k, i.note, e.seq, e.amount FROM items i JOIN events e ON e.k = i.k WHERE i.grp < 5"},
		{"colocated_join_group_by", "SELECT i.grp, count(*), sum(e.amount) FROM items i JOIN events e ON e.k = i.k GROUP BY i.grp"},
	} {
		for _, side := range []struct {
			name string
			conn *pgx.Conn
		}{{"router", router}, {"postgres", ref}} {
			b.Run(q.name+"/"+side.name, func(b *testing.B) {
				rows := 0
				for b.Loop() {
					r, err := side.conn.Query(ctx, q.sql)
					if err != nil {
						b.Fatal(err)
					}
					for r.Next() {
						rows++
					}
					if err := r.Err(); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
			})
		}
	}
}
