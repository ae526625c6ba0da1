package replicator

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/topo"
)

// benchRowsEnv overrides the benchmark's table size, for a quick run; the
// acceptance figure is taken at the default.
const benchRowsEnv = "TESSERA_BENCH_COPY_ROWS"

const defaultBenchRows = 2000000

// benchTopology places bench.public.events by id over t1 (below 0x80...)
// and t2, or, as group "one", all on t1.
const benchTopology = `{
  "authoritative_shard_group": "main",
  "shard_indexes": {"id_xx": {"type": "xxhash", "columns": ["id"]}},
  "shard_groups": [
    {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
    {"uid": "data", "default_shard_index": "id_xx",
     "key_ranges": [{"shard_uid": "t1", "end": "80"}, {"shard_uid": "t2", "start": "80"}]},
    {"uid": "one", "default_shard_index": "id_xx", "key_ranges": [{"shard_uid": "t1"}]}
  ],
  "databases": {
    "bench": {"schemas": {"public": {"tables": {"events": {"shard_group": "data"}}}}},
    "bench_one": {"schemas": {"public": {"tables": {"events": {"shard_group": "one"}}}}}
  }
}`

// eventsDDL is an ordinary table: a bigint key, a few integers, text and
// timestamps, some of them NULL.
const eventsDDL = `CREATE TABLE events (
	id         int8 PRIMARY KEY,
	account_id int8 NOT NULL,
	kind       int4 NOT NULL,
	amount     int8,
	status     text NOT NULL,
	note       text,
	created_at timestamptz NOT NULL,
	updated_at timestamptz)`

const loadEvents = `INSERT INTO events
	SELECT i, i % 100003, i % 17,
		CASE WHEN i % 10 = 0 THEN NULL ELSE (i * 37) % 1000000 END,
		(ARRAY['new', 'paid', 'shipped', 'returned'])[1 + i % 4],
		CASE WHEN i % 3 = 0 THEN NULL ELSE 'note ' || md5(i::text) END,
		timestamptz '2024-01-01 00:00:00Z' + i * interval '1 second',
		CASE WHEN i % 5 = 0 THEN NULL ELSE timestamptz '2024-06-01 00:00:00Z' + i * interval '1 second' END
	FROM generate_series(1, $1::int8) AS i`

// BenchmarkCopyVersusPipe measures, in one run and between the same
// Postgres instances (a source and two targets, each its own postmaster),
// a plain binary COPY TO STDOUT piped into COPY FROM STDIN, against the
// replicator's copy of the same table split over the two targets and whole
// to one; then how fast the change stream catches up on single-row and on
// 1000-row update transactions made while it was stopped. Figures are rows
// per second; copy_*/pipe are the ratios the goal (at least 0.5)
// is about. Run it alone: go test ./replicator -run '^$' -bench CopyVersusPipe -benchtime 1x
func BenchmarkCopyVersusPipe(b *testing.B) {
	rows := int64(defaultBenchRows)
	if v := os.Getenv(benchRowsEnv); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 1000 {
			b.Fatalf("%s=%q: want a row count of at least 1000", benchRowsEnv, v)
		}
		rows = n
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Hour)
	defer cancel()
	top, err := topo.Parse([]byte(benchTopology))
	if err != nil {
		b.Fatal(err)
	}
	split := top.Resolve("bench", "public", "events")
	whole := top.Resolve("bench_one", "public", "events")

	srcURL := createDatabase(b, "bench_src")
	src := connect(b, srcURL)
	mustExec(b, src, eventsDDL)
	start := time.Now()
	if _, err := src.Exec(ctx, loadEvents, rows); err != nil {
		b.Fatal(err)
	}
	execLong(b, ctx, src, "VACUUM ANALYZE events")
	b.Logf("loaded %d rows in %v", rows, time.Since(start).Round(time.Millisecond))
	targetURLs := []string{benchInstance(b, "t1"), benchInstance(b, "t2")}
	targets := make([]*pgx.Conn, len(targetURLs))
	for i, u := range targetURLs {
		targets[i] = connect(b, u)
		mustExec(b, targets[i], eventsDDL)
		if err := EnsureProgressTable(ctx, targets[i]); err != nil {
			b.Fatal(err)
		}
	}
	reset := func() {
		for _, c := range append([]*pgx.Conn{src}, targets...) {
			if c != src {
				execLong(b, ctx, c, "TRUNCATE events, _tessera.copy_progress")
			}
			execLong(b, ctx, c, "CHECKPOINT")
		}
	}
	copyWith := func(p *topo.Placement, shards []string) (int64, time.Duration) {
		reset()
		start := time.Now()
		read, err := src.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
		if err != nil {
			b.Fatal(err)
		}
		defer read.Rollback(context.Background())
		table, err := DescribeTable(ctx, read.Conn(), "public", "events", "id")
		if err != nil {
			b.Fatal(err)
		}
		var lsn pglogrepl.LSN
		if err := read.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn); err != nil {
			b.Fatal(err)
		}
		c := &Copier{Workflow: "bench", Source: "src", Snapshot: &Snapshot{LSN: lsn}, Read: read}
		for i, s := range shards {
			c.Targets = append(c.Targets, Target{Shard: s, Conn: targets[i]})
		}
		stats, err := c.CopyTable(ctx, table, p)
		if err != nil {
			b.Fatal(err)
		}
		return stats.Rows, time.Since(start)
	}

	var pipeTime, splitTime, wholeTime time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		reset()
		n, d := pipeCopy(b, ctx, src, targets[0])
		if n != rows {
			b.Fatalf("the pipe copied %d rows of %d", n, rows)
		}
		pipeTime += d
		if n, d = copyWith(whole, []string{"t1"}); n != rows {
			b.Fatalf("the copy to one target read %d rows of %d", n, rows)
		}
		wholeTime += d
		// Last, so that the catch-up below starts from its copy.
		if n, d = copyWith(split, []string{"t1", "t2"}); n != rows {
			b.Fatalf("the split copy read %d rows of %d", n, rows)
		}
		splitTime += d
	}
	b.StopTimer()
	var held int64
	for _, c := range targets {
		var n int64
		if err := c.QueryRow(ctx, "SELECT count(*) FROM events").Scan(&n); err != nil {
			b.Fatal(err)
		}
		held += n
	}
	if held != rows {
		b.Fatalf("the targets hold %d rows after the split copy, the source %d", held, rows)
	}
	perSec := func(d time.Duration) float64 { return float64(rows) * float64(b.N) / d.Seconds() }
	b.ReportMetric(perSec(pipeTime), "pipe_rows/s")
	b.ReportMetric(perSec(splitTime), "copy2_rows/s")
	b.ReportMetric(perSec(wholeTime), "copy1_rows/s")
	b.ReportMetric(pipeTime.Seconds()/splitTime.Seconds(), "copy2/pipe")
	b.ReportMetric(pipeTime.Seconds()/wholeTime.Seconds(), "copy1/pipe")

	single, batched := benchCatchUp(b, ctx, src, srcURL, targetURLs, split, rows)
	b.ReportMetric(single, "catchup_1row_tx_rows/s")
	b.ReportMetric(batched, "catchup_1000row_tx_rows/s")
}

// pipeCopy copies events from src to dst as a plain binary COPY pipe.
func pipeCopy(b *testing.B, ctx context.Context, src, dst *pgx.Conn) (int64, time.Duration) {
	start := time.Now()
	pr, pw := io.Pipe()
	read := make(chan error, 1)
	go func() {
		// Buffered as a shell pipe is: CopyTo writes each row on its own.
		buf := bufio.NewWriterSize(pw, 64<<10)
		_, err := src.PgConn().CopyTo(ctx, buf, "COPY events TO STDOUT (FORMAT binary)")
		if err == nil {
			err = buf.Flush()
		}
		pw.CloseWithError(err)
		read <- err
	}()
	tag, err := dst.PgConn().CopyFrom(ctx, pr, "COPY events FROM STDIN (FORMAT binary)")
	pr.CloseWithError(io.ErrClosedPipe)
	if rerr := <-read; rerr != nil {
		b.Fatal(rerr)
	}
	if err != nil {
		b.Fatal(err)
	}
	return tag.RowsAffected(), time.Since(start)
}

// benchCatchUp makes changes on the source while no stream runs, single-
// row update transactions first and 1000-row ones next, a tenth of the
// table each (200,000 rows at the default size), and times a stream to
// apply each kind up to the source's position after it.
func benchCatchUp(b *testing.B, ctx context.Context, src *pgx.Conn, srcURL string, targetURLs []string, p *topo.Placement, rows int64) (single, batched float64) {
	const slot, pub = "bench_slot", "bench_pub"
	mustExec(b, src, "CREATE PUBLICATION "+pub+" FOR TABLE events")
	mustExec(b, src, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot)
	b.Cleanup(func() { DropSlot(context.Background(), src, slot) })
	table, err := DescribeTable(ctx, src, "public", "events", "id")
	if err != nil {
		b.Fatal(err)
	}
	changes := rows / 10
	catchUp := func(kind string) float64 {
		var end pglogrepl.LSN
		if err := src.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&end); err != nil {
			b.Fatal(err)
		}
		s := &Stream{Workflow: "bench", Source: "src", SourceConnString: srcURL, Slot: slot, Publication: pub,
			Tables: []StreamTable{{Table: table, Placement: p}}, StopAt: end}
		for i, u := range targetURLs {
			s.Targets = append(s.Targets, Target{Shard: fmt.Sprintf("t%d", i+1), Conn: connect(b, u)})
		}
		start := time.Now()
		if err := s.Run(ctx); err != nil {
			b.Fatal(err)
		}
		d := time.Since(start)
		b.Logf("catch-up on %d rows in %s: %v", changes, kind, d.Round(time.Millisecond))
		return float64(changes) / d.Seconds()
	}
	// Server-side loops commit each transaction without a round trip, so
	// making the changes takes little of the run.
	execLong(b, ctx, src, `DO $$ BEGIN
		FOR i IN 1..`+strconv.FormatInt(changes, 10)+` LOOP
			UPDATE events SET amount = coalesce(amount, 0) + 1, updated_at = now() WHERE id = i * 7;
			COMMIT;
		END LOOP; END $$`)
	single = catchUp("single-row transactions")
	execLong(b, ctx, src, `DO $$ BEGIN
		FOR t IN 0..`+strconv.FormatInt(changes/1000-1, 10)+` LOOP
			UPDATE events SET status = 'batch', updated_at = now() WHERE id > t * 1000 AND id <= (t + 1) * 1000;
			COMMIT;
		END LOOP; END $$`)
	batched = catchUp("1000-row transactions")

	// The targets converged on the source.
	var want, got int64
	if err := src.QueryRow(ctx, "SELECT count(*) FROM events WHERE status = 'batch'").Scan(&want); err != nil {
		b.Fatal(err)
	}
	for _, u := range targetURLs {
		var n int64
		if err := connect(b, u).QueryRow(ctx, "SELECT count(*) FROM events WHERE status = 'batch'").Scan(&n); err != nil {
			b.Fatal(err)
		}
		got += n
	}
	if got != want || want != changes/1000*1000 {
		b.Fatalf("the targets hold %d rows of the batched updates, the source %d", got, want)
	}
	return single, batched
}

// benchInstance starts a Postgres of its own, with the shared test
// instance's settings, for as long as the benchmark runs, and returns the
// connection string of its database "bench".
func benchInstance(b *testing.B, id string) string {
	b.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "replicator-bench-")
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	inst, err := pgmanager.New(pgmanager.Config{
		InstanceID: "replicator-bench-" + id,
		Dir:        filepath.Join(dir, "pg"),
		Port:       freePort(),
		Settings:   map[string]string{"max_connections": "40", "fsync": "off"},
	})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { inst.Close(context.Background()) })
	if err := inst.InitPrimary(ctx); err != nil {
		b.Fatal(err)
	}
	if err := inst.Start(ctx); err != nil {
		b.Fatal(err)
	}
	admin := connect(b, inst.ConnConfig("postgres", ""))
	mustExec(b, admin, "CREATE DATABASE bench")
	return inst.ConnConfig("bench", "")
}

// execLong runs a statement that may take longer than mustExec allows.
func execLong(b *testing.B, ctx context.Context, conn *pgx.Conn, sql string) {
	b.Helper()
	if _, err := conn.Exec(ctx, sql); err != nil {
		b.Fatalf("%s: %v", firstLine(sql), err)
	}
}
