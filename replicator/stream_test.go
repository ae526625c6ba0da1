package replicator

import (
	"context"
	"errors"
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
)

// writeChanges runs random transactions on the source until stop is
// closed or n transactions are done: inserts, updates of values and of
// TOASTed notes, updates that change the shard key (the row moves shard),
// deletes, and transactions mixing several of them.
func writeChanges(ctx context.Context, src *pgx.Conn, seed int64, n int, stop <-chan struct{}) (int, error) {
	rnd := rand.New(rand.NewSource(seed))
	nextID := 100000 + int(seed)*100000
	tenants := []string{"acme", "o'brien \\ co", "zeta", "ünïcode"}
	for done := 0; done < n; done++ {
		select {
		case <-stop:
			return done, nil
		default:
		}
		tx, err := src.Begin(ctx)
		if err != nil {
			return done, err
		}
		for k := 0; k <= rnd.Intn(3); k++ {
			id := 1 + rnd.Intn(2000)
			var sql string
			var args []any
			switch rnd.Intn(6) {
			case 0:
				nextID++
				sql = `INSERT INTO orders (tenant, id, customer_id, price, note, payload)
					VALUES ($1, $2, $3, $4, $5, decode(repeat(md5($7), $6), 'hex'))`
				args = []any{tenants[rnd.Intn(4)], nextID, rnd.Intn(100003), fmt.Sprintf("%d.%02d", rnd.Intn(1000), rnd.Intn(100)),
					fmt.Sprintf("inserted %d", nextID), 1 + rnd.Intn(300), fmt.Sprint(nextID)}
			case 1:
				sql, args = "UPDATE orders SET price = price + 1, flag = NOT coalesce(flag, false) WHERE id = $1", []any{id}
			case 2:
				sql, args = "UPDATE orders SET customer_id = customer_id + 1 + $2 WHERE id = $1", []any{id, rnd.Intn(50)}
			case 3:
				sql, args = "UPDATE orders SET note = repeat('toasted ' || $2::text, 500) WHERE id = $1", []any{id, fmt.Sprint(rnd.Intn(1000))}
			case 4:
				sql, args = "DELETE FROM orders WHERE id = $1", []any{id}
			default:
				sql, args = "UPDATE orders SET tags = ARRAY['moved', $2::text], doc = NULL WHERE id = $1", []any{id, fmt.Sprint(rnd.Intn(9))}
			}
			if _, err := tx.Exec(ctx, sql, args...); err != nil {
				tx.Rollback(ctx)
				return done, err
			}
		}
		if err := tx.Commit(ctx); err != nil {
			return done, err
		}
	}
	return n, nil
}

func TestStreamAppliesChangesDuringAndAfterCopy(t *testing.T) {
	top, err := topo.Parse([]byte(moveTopology))
	if err != nil {
		t.Fatal(err)
	}
	placement := top.Resolve("shop", "public", "orders")
	srcURL := createDatabase(t, "cdc_src")
	targetURLs := map[string]string{"t1": createDatabase(t, "cdc_t1"), "t2": createDatabase(t, "cdc_t2")}
	src := connect(t, srcURL)
	mustExec(t, src, ordersDDL)
	insertOrders(t, src, 1, 2000)
	mustExec(t, src, "CREATE PUBLICATION wf2_pub FOR TABLE orders")
	for _, u := range targetURLs {
		c := connect(t, u)
		mustExec(t, c, ordersDDL)
		if err := EnsureProgressTable(testCtx(t), c); err != nil {
			t.Fatal(err)
		}
	}
	const slot = "wf2_slot"
	ctx := testCtx(t)
	table, err := DescribeTable(ctx, src, "public", "orders", "customer_id")
	if err != nil {
		t.Fatal(err)
	}
	tables := []StreamTable{{Table: table, Placement: placement}}
	// Small batches (a few source transactions per target transaction)
	// let the stream be killed between two of them, many times over.
	stream := func(t *testing.T) *Stream {
		return &Stream{
			Workflow: "wf2", Source: "src", SourceConnString: srcURL, Slot: slot, Publication: "wf2_pub",
			Tables: tables, StatusInterval: 200 * time.Millisecond, batchChanges: 4,
			Targets: []Target{{"t1", connect(t, targetURLs["t1"])}, {"t2", connect(t, targetURLs["t2"])}},
		}
	}

	// The shard key customer_id is not in the primary key, so the default
	// replica identity cannot route deletes: refused before anything runs.
	if err := stream(t).Run(ctx); pgerr.Code(err) != pgerr.ObjectNotInPrerequisiteState {
		t.Fatalf("Run with the default replica identity: %v, want 55000", err)
	}
	mustExec(t, src, "ALTER TABLE orders REPLICA IDENTITY FULL")

	// Writers change the source all through the copy.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	writeErrs := make([]error, 2)
	writes := make([]int, 2)
	for w := 0; w < 2; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.Connect(ctx, srcURL)
			if err != nil {
				writeErrs[w] = err
				return
			}
			defer conn.Close(context.Background())
			writes[w], writeErrs[w] = writeChanges(ctx, conn, int64(w+1), 1000000, stop)
		}()
	}

	snap, err := OpenSnapshot(ctx, srcURL, slot, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { DropSlot(context.Background(), src, slot) })
	read, err := BeginSnapshotRead(ctx, connect(t, srcURL), snap)
	if err != nil {
		t.Fatal(err)
	}
	snap.Close(ctx)
	copier := &Copier{
		Workflow: "wf2", Source: "src", Snapshot: snap, Read: read, BatchRows: 200,
		Targets: []Target{{"t1", connect(t, targetURLs["t1"])}, {"t2", connect(t, targetURLs["t2"])}},
	}
	if _, err := copier.CopyTable(ctx, table, placement); err != nil {
		t.Fatal(err)
	}
	read.Rollback(ctx)
	close(stop)
	wg.Wait()
	for _, err := range writeErrs {
		if err != nil {
			t.Fatal(err)
		}
	}
	// And after it.
	if _, err := writeChanges(ctx, src, 3, 300, nil); err != nil {
		t.Fatal(err)
	}
	t.Logf("%d + 300 source transactions during and after the copy", writes[0]+writes[1])
	var end pglogrepl.LSN
	if err := src.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&end); err != nil {
		t.Fatal(err)
	}

	// Kill the stream in the middle of a batch's apply (after one target
	// committed it), then run it again up to the end.
	type applied struct {
		target int
		end    pglogrepl.LSN
	}
	seen := map[applied]int{}
	var mu sync.Mutex
	record := func(target int, end pglogrepl.LSN) {
		mu.Lock()
		seen[applied{target, end}]++
		mu.Unlock()
	}
	runCtx, cancel := context.WithCancel(ctx)
	first := stream(t)
	n := 0
	var earlyLagBytes int64
	var earlyLagSeconds float64
	first.afterApply = func(target int, end pglogrepl.LSN) {
		record(target, end)
		n++
		if n == 10 {
			// Hundreds of source transactions are still to come.
			earlyLagBytes, earlyLagSeconds = first.Lag()
		}
		if n == 40 {
			cancel()
		}
	}
	if err := first.Run(runCtx); !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped stream returned %v", err)
	}
	if earlyLagBytes <= 0 || earlyLagSeconds <= 0 {
		t.Errorf("lag at the tenth applied transaction: %d bytes, %.3fs; want both above zero", earlyLagBytes, earlyLagSeconds)
	}
	second := stream(t)
	second.StopAt = end
	second.afterApply = record
	if err := second.Run(ctx); err != nil {
		t.Fatal(err)
	}
	for a, times := range seen {
		if times > 1 {
			t.Fatalf("batch ending at %s applied %d times on target %d", a.end, times, a.target)
		}
	}
	if len(seen) < 100 {
		t.Fatalf("only %d target transactions applied", len(seen))
	}
	t.Logf("%d target transactions applied; lag at the tenth: %d bytes, %.1fs", len(seen), earlyLagBytes, earlyLagSeconds)

	want := rowsOf(t, src, "")
	t1, t2 := connect(t, targetURLs["t1"]), connect(t, targetURLs["t2"])
	got := map[string]int{}
	for _, r := range append(rowsOf(t, t1, ""), rowsOf(t, t2, "")...) {
		got[r]++
	}
	for _, r := range want {
		if got[r] != 1 {
			t.Fatalf("source row %.200s is on the targets %d times", r, got[r])
		}
		delete(got, r)
	}
	for r := range got {
		t.Fatalf("target row %.200s is not on the source", r)
	}
	for shard, conn := range map[string]*pgx.Conn{"t1": t1, "t2": t2} {
		rows, err := conn.Query(ctx, "SELECT customer_id FROM orders")
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if _, want, _ := placement.RouteInt(id); want != shard {
				t.Fatalf("customer_id %d is on %s, topo routes it to %s", id, shard, want)
			}
		}
	}
	var confirmed pglogrepl.LSN
	if err := src.QueryRow(ctx, "SELECT confirmed_flush_lsn FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&confirmed); err != nil {
		t.Fatal(err)
	}
	if confirmed < end {
		t.Errorf("slot confirmed %s, the targets applied up to %s", confirmed, end)
	}
}

// With the default replica identity and the shard key in the primary key,
// deletes carry only the key, and updates do not resend unchanged TOASTed
// values: the stream updates the columns it was sent. A row that moves
// shard with such a value cannot be rebuilt on its new target, and the
// stream says so rather than write a row without it.
func TestStreamWithKeyOnlyReplicaIdentity(t *testing.T) {
	top, err := topo.Parse([]byte(moveTopology))
	if err != nil {
		t.Fatal(err)
	}
	placement := top.Resolve("shop", "public", "orders")
	const ddl = `CREATE TABLE orders (customer_id int8, id int8, price numeric, note text,
		PRIMARY KEY (customer_id, id))`
	srcURL := createDatabase(t, "keyid_src")
	targetURLs := map[string]string{"t1": createDatabase(t, "keyid_t1"), "t2": createDatabase(t, "keyid_t2")}
	src := connect(t, srcURL)
	for _, u := range []string{srcURL, targetURLs["t1"], targetURLs["t2"]} {
		mustExec(t, connect(t, u), ddl)
	}
	mustExec(t, src, "CREATE PUBLICATION wf3_pub FOR TABLE orders")
	// Applying raises synchronous_commit=off to on in its transactions.
	mustExec(t, src, "ALTER DATABASE keyid_t1 SET synchronous_commit = off")
	ctx := testCtx(t)
	table, err := DescribeTable(ctx, src, "public", "orders", "customer_id")
	if err != nil {
		t.Fatal(err)
	}
	const slot = "wf3_slot"
	snap, err := OpenSnapshot(ctx, srcURL, slot, false)
	if err != nil {
		t.Fatal(err)
	}
	snap.Close(ctx)
	t.Cleanup(func() { DropSlot(context.Background(), src, slot) })

	// Rows 1..100, every tenth with a note TOASTed out of line
	// (incompressible, so it is not kept inline compressed).
	mustExec(t, src, `INSERT INTO orders SELECT i * 31, i, i / 4.0,
		CASE WHEN i % 10 = 0 THEN (SELECT string_agg(md5(i::text || g::text), '') FROM generate_series(1, 200) g)
		ELSE 'short ' || i END FROM generate_series(1, 100) i`)
	mustExec(t, src, "UPDATE orders SET price = price + 1 WHERE id % 5 = 0")              // toasted notes unchanged: not resent
	mustExec(t, src, "DELETE FROM orders WHERE id % 7 = 0")                               // key-only old rows
	mustExec(t, src, "UPDATE orders SET customer_id = customer_id + 1 WHERE id % 10 = 3") // moves, short notes
	var end pglogrepl.LSN
	if err := src.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&end); err != nil {
		t.Fatal(err)
	}
	stream := func() *Stream {
		return &Stream{
			Workflow: "wf3", Source: "src", SourceConnString: srcURL, Slot: slot, Publication: "wf3_pub",
			Tables: []StreamTable{{Table: table, Placement: placement}}, StatusInterval: 200 * time.Millisecond, StopAt: end,
			Targets: []Target{{"t1", connect(t, targetURLs["t1"])}, {"t2", connect(t, targetURLs["t2"])}},
		}
	}
	if err := stream().Run(ctx); err != nil {
		t.Fatal(err)
	}
	want := rowsOf(t, src, "")
	got := append(rowsOf(t, connect(t, targetURLs["t1"]), ""), rowsOf(t, connect(t, targetURLs["t2"]), "")...)
	slices.Sort(got)
	slices.Sort(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("targets hold %d rows, source %d, or they differ", len(got), len(want))
	}

	// Moving a row whose TOASTed note is unchanged cannot be replayed.
	mustExec(t, src, "UPDATE orders SET customer_id = customer_id + 1 WHERE id = 20")
	if err := src.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&end); err != nil {
		t.Fatal(err)
	}
	err = stream().Run(ctx)
	if pgerr.Code(err) != pgerr.FeatureNotSupported || !strings.Contains(err.Error(), "REPLICA IDENTITY FULL") {
		t.Fatalf("moving a row with an unsent TOASTed value: %v, want 0A000 naming REPLICA IDENTITY FULL", err)
	}
}

// A copy resumed from a later snapshot holds its stretch of rows as of
// that snapshot; the stream, which starts at the first snapshot, must not
// apply older changes to those rows (the row would go back in time until
// the stream caught up), and must apply them to the rows copied earlier.
func TestStreamAfterResumedCopy(t *testing.T) {
	top, err := topo.Parse([]byte(moveTopology))
	if err != nil {
		t.Fatal(err)
	}
	placement := top.Resolve("shop", "public", "orders")
	srcURL := createDatabase(t, "resume_src")
	targetURLs := map[string]string{"t1": createDatabase(t, "resume_t1"), "t2": createDatabase(t, "resume_t2")}
	src := connect(t, srcURL)
	mustExec(t, src, ordersDDL)
	insertOrders(t, src, 1, 3000)
	mustExec(t, src, "ALTER TABLE orders REPLICA IDENTITY FULL")
	mustExec(t, src, "CREATE PUBLICATION wf4_pub FOR TABLE orders")
	for _, u := range targetURLs {
		c := connect(t, u)
		mustExec(t, c, ordersDDL)
		if err := EnsureProgressTable(testCtx(t), c); err != nil {
			t.Fatal(err)
		}
	}
	const slot = "wf4_slot"
	t.Cleanup(func() { DropSlot(context.Background(), src, slot) })
	ctx := testCtx(t)

	// The copy stops inside tenant "o'brien \ co"; tenant zeta sorts
	// after it, acme before.
	_, err = copyOnce(t, "wf4", srcURL, targetURLs, slot, false, func(cancel func(), batch, target int, committed bool) {
		if batch == 5 && target == 0 && committed {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped copy returned %v", err)
	}
	// Between the two snapshots: zeta's row 2 passes through v1 to v2
	// (the resumed copy takes v2); acme's rows, copied already, change.
	mustExec(t, src, "UPDATE orders SET note = 'v1' WHERE tenant = 'zeta' AND id = 2")
	mustExec(t, src, "UPDATE orders SET note = 'v2' WHERE tenant = 'zeta' AND id = 2")
	mustExec(t, src, "UPDATE orders SET note = 'changed after the kill', customer_id = customer_id + 3 WHERE tenant = 'acme' AND id < 100")
	mustExec(t, src, "DELETE FROM orders WHERE tenant = 'acme' AND id BETWEEN 100 AND 200")
	mustExec(t, src, "UPDATE orders SET tenant = 'zeta' WHERE tenant = 'acme' AND id BETWEEN 200 AND 300")
	if _, err := copyOnce(t, "wf4", srcURL, targetURLs, slot, true, nil); err != nil {
		t.Fatal(err)
	}
	// After both.
	mustExec(t, src, "UPDATE orders SET note = 'v3' WHERE tenant = 'zeta' AND id = 6")
	var end pglogrepl.LSN
	if err := src.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&end); err != nil {
		t.Fatal(err)
	}

	table, err := DescribeTable(ctx, src, "public", "orders", "customer_id")
	if err != nil {
		t.Fatal(err)
	}
	t1, t2 := connect(t, targetURLs["t1"]), connect(t, targetURLs["t2"])
	regressed := 0
	s := &Stream{
		Workflow: "wf4", Source: "src", SourceConnString: srcURL, Slot: slot, Publication: "wf4_pub",
		Tables: []StreamTable{{Table: table, Placement: placement}}, StatusInterval: 200 * time.Millisecond, StopAt: end,
		Targets: []Target{{"t1", connect(t, targetURLs["t1"])}, {"t2", connect(t, targetURLs["t2"])}},
		afterApply: func(target int, _ pglogrepl.LSN) {
			for _, c := range []*pgx.Conn{t1, t2} {
				var n int
				if err := c.QueryRow(ctx, "SELECT count(*) FROM orders WHERE tenant = 'zeta' AND id = 2 AND note = 'v1'").Scan(&n); err != nil {
					t.Error(err)
				}
				regressed += n
			}
		},
	}
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if regressed > 0 {
		t.Errorf("a row copied at v2 went back to v1 while the stream caught up")
	}
	want := rowsOf(t, src, "")
	got := append(rowsOf(t, t1, ""), rowsOf(t, t2, "")...)
	slices.Sort(want)
	slices.Sort(got)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("targets hold %d rows, source %d, or they differ", len(got), len(want))
	}
}
