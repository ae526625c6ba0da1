package replicator

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
)

// moveTopology places shop.public.orders by customer_id (xxhash) over two
// shards, t1 below 0x80... and t2 above.
const moveTopology = `{
  "authoritative_shard_group": "main",
  "shard_indexes": {"customer_xx": {"type": "xxhash", "columns": ["customer_id"]}},
  "shard_groups": [
    {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
    {"uid": "data", "default_shard_index": "customer_xx",
     "key_ranges": [{"shard_uid": "t1", "end": "80"}, {"shard_uid": "t2", "start": "80"}]}
  ],
  "databases": {"shop": {"schemas": {"public": {"tables": {"orders": {"shard_group": "data"}}}}}}
}`

// ordersDDL has a composite primary key led by text, so that resuming
// compares row values and quotes literals; NULLs, values over 2 kB
// (TOASTed), arrays, jsonb and a generated column, which COPY must skip.
const ordersDDL = `CREATE TABLE public.orders (
	tenant      text NOT NULL,
	id          int8 NOT NULL,
	customer_id int8 NOT NULL,
	price       numeric(12,2),
	created     timestamptz,
	payload     bytea,
	note        text,
	flag        bool,
	ref         uuid,
	tags        text[],
	doc         jsonb,
	doubled     numeric GENERATED ALWAYS AS (price * 2) STORED,
	PRIMARY KEY (tenant, id))`

// insertOrders adds rows from..to (inclusive) to the source.
func insertOrders(t testing.TB, src *pgx.Conn, from, to int) {
	t.Helper()
	mustExec(t, src, `INSERT INTO orders (tenant, id, customer_id, price, created, payload, note, flag, ref, tags, doc)
		SELECT CASE i % 4 WHEN 0 THEN 'acme' WHEN 1 THEN 'o''brien \ co' WHEN 2 THEN 'zeta' ELSE 'ünïcode' END,
			i, (i * 7919) % 100003,
			CASE WHEN i % 7 = 0 THEN NULL ELSE round(i / 3.0, 2) END,
			CASE WHEN i % 11 = 0 THEN NULL ELSE timestamptz '2024-02-29 13:45:06.123456Z' + i * interval '37 minutes' END,
			CASE WHEN i % 50 = 0 THEN decode(repeat(md5(i::text), 200), 'hex')
			     WHEN i % 13 = 0 THEN NULL ELSE decode(md5(i::text), 'hex') END,
			CASE WHEN i % 60 = 0 THEN repeat('long note ' || i, 400)
			     WHEN i % 5 = 0 THEN NULL ELSE 'note ' || i END,
			CASE WHEN i % 3 = 0 THEN NULL ELSE i % 2 = 0 END,
			md5(i::text)::uuid,
			CASE WHEN i % 9 = 0 THEN NULL ELSE ARRAY['t' || i, NULL, 'x'] END,
			jsonb_build_object('i', i, 'even', i % 2 = 0)
		FROM generate_series($1::int, $2::int) AS i`, from, to)
}

// rowsOf returns every row's text form, all columns, sorted by key.
func rowsOf(t *testing.T, conn *pgx.Conn, where string) []string {
	t.Helper()
	rows, err := conn.Query(testCtx(t), "SELECT o::text FROM orders o "+where+" ORDER BY 1")
	if err != nil {
		t.Fatal(err)
	}
	out, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// copyOnce copies shop.public.orders with a fresh snapshot and fresh
// connections, as a restarted worker would: from the permanent slot the
// first time, from a temporary one when resuming. stopAt, if set, runs
// before each target writes a batch and after it commits it, and may
// cancel the copy.
func copyOnce(t *testing.T, workflow, srcURL string, targetURLs map[string]string, slot string, resume bool,
	stopAt func(cancel func(), batch, target int, committed bool)) (CopyStats, error) {
	t.Helper()
	top, err := topo.Parse([]byte(moveTopology))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(testCtx(t))
	defer cancel()
	if resume {
		slot += "_resume"
	}
	snap, err := OpenSnapshot(ctx, srcURL, slot, resume)
	if err != nil {
		t.Fatal(err)
	}
	defer snap.Close(context.Background())
	read, err := BeginSnapshotRead(ctx, connect(t, srcURL), snap)
	if err != nil {
		t.Fatal(err)
	}
	defer read.Rollback(context.Background())
	table, err := DescribeTable(ctx, read.Conn(), "public", "orders", "customer_id")
	if err != nil {
		t.Fatal(err)
	}
	c := &Copier{
		Workflow: workflow, Source: "src", Snapshot: snap, Read: read, BatchRows: 250,
		Targets: []Target{{"t1", connect(t, targetURLs["t1"])}, {"t2", connect(t, targetURLs["t2"])}},
	}
	if stopAt != nil {
		c.atTarget = func(batch, target int, committed bool) { stopAt(cancel, batch, target, committed) }
	}
	return c.CopyTable(ctx, table, top.Resolve("shop", "public", "orders"))
}

func TestCopyTableResumesAfterBeingKilled(t *testing.T) {
	top, err := topo.Parse([]byte(moveTopology))
	if err != nil {
		t.Fatal(err)
	}
	placement := top.Resolve("shop", "public", "orders")
	srcURL := createDatabase(t, "copy_src")
	targetURLs := map[string]string{"t1": createDatabase(t, "copy_t1"), "t2": createDatabase(t, "copy_t2")}
	src := connect(t, srcURL)
	mustExec(t, src, ordersDDL)
	insertOrders(t, src, 1, 3000)
	for _, u := range targetURLs {
		c := connect(t, u)
		mustExec(t, c, ordersDDL)
		if err := EnsureProgressTable(testCtx(t), c); err != nil {
			t.Fatal(err)
		}
	}
	const slot = "wf1_copy_src"
	t.Cleanup(func() { DropSlot(context.Background(), src, slot) })

	run := func(t *testing.T, resume bool, stopAt func(cancel func(), batch, target int, committed bool)) (CopyStats, error) {
		return copyOnce(t, "wf1", srcURL, targetURLs, slot, resume, stopAt)
	}

	// Kill the copy after target t1 committed batch 5 and before t2 did.
	_, err = run(t, false, func(cancel func(), batch, target int, committed bool) {
		if batch == 5 && target == 0 && committed {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped copy returned %v, want a context cancellation", err)
	}
	t1, t2 := connect(t, targetURLs["t1"]), connect(t, targetURLs["t2"])
	progress := func(c *pgx.Conn) []string {
		var keys []string
		if err := c.QueryRow(testCtx(t), `SELECT last_key FROM _tessera.copy_progress
			WHERE workflow = 'wf1' ORDER BY snapshot_lsn DESC LIMIT 1`).Scan(&keys); err != nil {
			t.Fatal(err)
		}
		return keys
	}
	p1, p2 := progress(t1), progress(t2)
	if strings.Join(p1, ",") == strings.Join(p2, ",") {
		t.Fatalf("both targets stopped at %q: the kill should have left t1 a batch ahead", p1)
	}
	if len(rowsOf(t, t1, "")) == 0 || len(rowsOf(t, t2, "")) == 0 {
		t.Fatal("the stopped copy wrote nothing")
	}
	t.Logf("stopped with t1 at %q, t2 at %q", p1, p2)

	// Rows written after the kill beyond the copied keys are in the
	// resumed copy's new snapshot. (Rows written among the keys already
	// copied are the change stream's to deliver, from the first slot.)
	insertOrders(t, src, 3001, 3400)
	mustExec(t, src, "UPDATE orders SET tenant = 'zeta' WHERE id > 3000")
	stats, err := run(t, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	if stats.Rows >= 3400 || stats.Batches < 2 {
		t.Fatalf("the resumed copy read %d rows in %d batches: it did not resume", stats.Rows, stats.Batches)
	}
	t.Logf("resumed: %d rows in %d batches, %v to the targets", stats.Rows, stats.Batches, stats.TargetRows)

	want := rowsOf(t, src, "")
	got := append(rowsOf(t, t1, ""), rowsOf(t, t2, "")...)
	if len(got) != len(want) {
		t.Fatalf("targets hold %d rows, source %d", len(got), len(want))
	}
	wantSet := map[string]bool{}
	for _, r := range want {
		wantSet[r] = true
	}
	for _, r := range got {
		if !wantSet[r] {
			t.Fatalf("target row %s is not on the source", r)
		}
		delete(wantSet, r)
	}
	if len(wantSet) != 0 {
		t.Fatalf("%d source rows missing on the targets", len(wantSet))
	}

	// Every row sits on the shard topo routes its customer_id to.
	for shard, conn := range map[string]*pgx.Conn{"t1": t1, "t2": t2} {
		rows, err := conn.Query(testCtx(t), "SELECT customer_id FROM orders")
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			_, want, err := placement.RouteInt(id)
			if err != nil {
				t.Fatal(err)
			}
			if want != shard {
				t.Fatalf("customer_id %d is on %s, topo routes it to %s", id, shard, want)
			}
		}
	}

	// A finished copy has nothing left to do.
	stats, err = run(t, true, nil)
	if err != nil || stats.Batches != 0 {
		t.Fatalf("copying a finished table again: %d batches, %v", stats.Batches, err)
	}
}

func TestDescribeTable(t *testing.T) {
	conn := connect(t, createDatabase(t, "describe"))
	mustExec(t, conn, `CREATE TABLE nokey (a int8, b text);
		CREATE TABLE nullable_unique (a int8 UNIQUE, b text);
		CREATE TABLE unique_only (a int8, b text NOT NULL, c int4 NOT NULL, UNIQUE (c, b));
		CREATE TABLE pk (x float8, id int8 PRIMARY KEY, u int4 NOT NULL UNIQUE)`)
	ctx := testCtx(t)
	for _, table := range []string{"nokey", "nullable_unique"} {
		_, err := DescribeTable(ctx, conn, "public", table, "a")
		if pgerr.Code(err) != pgerr.ObjectNotInPrerequisiteState || !strings.Contains(err.Error(), "primary key") {
			t.Errorf("%s: got %v, want a 55000 refusal naming the missing key", table, err)
		}
	}
	tb, err := DescribeTable(ctx, conn, "public", "unique_only", "a")
	if err != nil {
		t.Fatal(err)
	}
	if len(tb.OrderKey) != 2 || tb.Columns[tb.OrderKey[0]].Name != "c" || tb.Columns[tb.OrderKey[1]].Name != "b" {
		t.Errorf("unique_only orders by %v, want (c, b)", tb.OrderKey)
	}
	tb, err = DescribeTable(ctx, conn, "public", "pk", "id")
	if err != nil {
		t.Fatal(err)
	}
	if len(tb.OrderKey) != 1 || tb.Columns[tb.OrderKey[0]].Name != "id" || tb.ShardKey != 1 {
		t.Errorf("pk: order key %v, shard key %d; want the primary key id, column 1", tb.OrderKey, tb.ShardKey)
	}
	if _, err := DescribeTable(ctx, conn, "public", "pk", "x"); pgerr.Code(err) != pgerr.FeatureNotSupported {
		t.Errorf("a float8 shard key: got %v, want 0A000", err)
	}
	if _, err := DescribeTable(ctx, conn, "public", "pk", "missing"); pgerr.Code(err) != "42703" {
		t.Errorf("a missing shard column: got %v, want 42703", err)
	}
	if _, err := DescribeTable(ctx, conn, "public", "absent", "a"); pgerr.Code(err) != "42P01" {
		t.Errorf("a missing table: got %v, want 42P01", err)
	}
}

// Each batch starts after the previous batch's last key, written as text
// and read back by the source: a key type whose text form lost precision
// would skip or repeat rows. Small batches put many boundaries on keys of
// every type an order key is likely to have.
func TestCopyTableOrderKeyTypes(t *testing.T) {
	top, err := topo.Parse([]byte(moveTopology))
	if err != nil {
		t.Fatal(err)
	}
	placement := top.Resolve("shop", "public", "orders")
	// Each case is a key column type and the key of row i.
	keys := []struct{ typ, expr string }{
		{"int2", "(i - 150)::int2"},
		{"int4", "i * 1000003"},
		{"numeric", "i / 7.0 + 0.000000000000000000001"},
		{"timestamptz", "timestamptz '1999-12-31 23:59:59.999999+00' + i * interval '1 hour 0.000001 second'"},
		{"timestamp", "timestamp '0100-01-01 00:00:00' + i * interval '97 days 0.000003 second'"},
		{"date", "date '2000-02-28' + i"},
		{"uuid", "md5(i::text)::uuid"},
		{"bytea", "decode(md5(i::text), 'hex')"},
		{"text", "repeat(chr(32 + i % 90), 1 + i % 5) || i || '\\' || ''''"},
		{"float8", "i / 3.0::float8"},
		{"bool", "i % 2 = 0"}, // many rows per value: the key is (k, customer_id)
	}
	srcURL := createDatabase(t, "keys_src")
	targetURLs := map[string]string{"t1": createDatabase(t, "keys_t1"), "t2": createDatabase(t, "keys_t2")}
	src := connect(t, srcURL)
	targets := []Target{{"t1", connect(t, targetURLs["t1"])}, {"t2", connect(t, targetURLs["t2"])}}
	for _, key := range keys {
		ddl := "CREATE TABLE orders (k " + key.typ + ", customer_id int8 NOT NULL, PRIMARY KEY (k, customer_id))"
		t.Run(key.typ, func(t *testing.T) {
			for _, c := range append([]*pgx.Conn{src}, targets[0].Conn, targets[1].Conn) {
				mustExec(t, c, "DROP TABLE IF EXISTS orders; DROP SCHEMA IF EXISTS _tessera CASCADE; "+ddl)
			}
			mustExec(t, src, "INSERT INTO orders SELECT "+key.expr+", i FROM generate_series(1, 300) i")
			for _, tg := range targets {
				if err := EnsureProgressTable(testCtx(t), tg.Conn); err != nil {
					t.Fatal(err)
				}
			}
			ctx := testCtx(t)
			// No slot: this test is about batch boundaries, and any
			// REPEATABLE READ snapshot holds the rows still.
			read, err := src.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
			if err != nil {
				t.Fatal(err)
			}
			defer read.Rollback(context.Background())
			table, err := DescribeTable(ctx, read.Conn(), "public", "orders", "customer_id")
			if err != nil {
				t.Fatal(err)
			}
			c := &Copier{Workflow: "keys", Source: "src", Snapshot: &Snapshot{LSN: 1}, Read: read, Targets: targets, BatchRows: 7}
			stats, err := c.CopyTable(ctx, table, placement)
			if err != nil {
				t.Fatal(err)
			}
			if stats.Rows != 300 || stats.Batches < 40 {
				t.Fatalf("read %d rows in %d batches, want 300 in 43", stats.Rows, stats.Batches)
			}
			read.Rollback(ctx)
			want := rowsOf(t, src, "")
			got := map[string]bool{}
			for _, tg := range targets {
				for _, r := range rowsOf(t, tg.Conn, "") {
					got[r] = true
				}
			}
			for _, r := range want {
				if !got[r] {
					t.Fatalf("row %s was not copied", r)
				}
			}
			if len(got) != len(want) {
				t.Fatalf("targets hold %d rows, source %d", len(got), len(want))
			}
		})
	}
}
