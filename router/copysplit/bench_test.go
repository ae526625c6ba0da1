package copysplit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// BenchmarkCopyInto measures COPY FROM STDIN of benchRows rows (the
// tests' generated rows, bigint keys) through the router into four
// shards, and the same COPY into one Postgres (the reference database, on
// shard-0's server) in the same run, in each format: it reports rows/s of
// both and their ratio (router / postgres).
func BenchmarkCopyInto(b *testing.B) {
	const benchRows = 50000
	e := newEnv(b)
	ctx := context.Background()
	kind := keyKinds[0]
	e.create(b, "bench", fmt.Sprintf(columnsDDL, kind.sqlType))
	for _, format := range copyFormats {
		b.Run(format, func(b *testing.B) {
			var routerTime, directTime time.Duration
			for range b.N {
				for _, side := range []struct {
					conn *pgx.Conn
					took *time.Duration
				}{{e.router, &routerTime}, {e.ref, &directTime}} {
					if _, err := side.conn.Exec(ctx, "TRUNCATE bench"); err != nil {
						b.Fatal(err)
					}
					start := time.Now()
					n, err := copyRows(ctx, side.conn, "bench", kind, format, 0, benchRows)
					if err != nil || n != benchRows {
						b.Fatalf("COPY: %d, %v", n, err)
					}
					*side.took += time.Since(start)
				}
			}
			rows := float64(benchRows * b.N)
			b.ReportMetric(rows/routerTime.Seconds(), "router_rows/s")
			b.ReportMetric(rows/directTime.Seconds(), "postgres_rows/s")
			b.ReportMetric(directTime.Seconds()/routerTime.Seconds(), "ratio")
		})
	}
}
