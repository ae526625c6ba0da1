package replicator

import (
	"context"
	"net"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/topo"
)

// A backlog of small source transactions, as concurrent writers make, is
// applied in a few target transactions, not one per source transaction:
// each target transaction waits for its WAL flush, and a stream applying
// them one by one falls behind a few busy writers for good.
func TestStreamBatchesSourceTransactions(t *testing.T) {
	top, err := topo.Parse([]byte(moveTopology))
	if err != nil {
		t.Fatal(err)
	}
	placement := top.Resolve("shop", "public", "orders")
	const ddl = `CREATE TABLE orders (customer_id int8, id int8, note text, PRIMARY KEY (customer_id, id))`
	srcURL := createDatabase(t, "batch_src")
	targetURLs := map[string]string{"t1": createDatabase(t, "batch_t1"), "t2": createDatabase(t, "batch_t2")}
	src := connect(t, srcURL)
	for _, u := range []string{srcURL, targetURLs["t1"], targetURLs["t2"]} {
		mustExec(t, connect(t, u), ddl)
	}
	mustExec(t, src, "CREATE PUBLICATION wf5_pub FOR TABLE orders")
	ctx := testCtx(t)
	table, err := DescribeTable(ctx, src, "public", "orders", "customer_id")
	if err != nil {
		t.Fatal(err)
	}
	const slot = "wf5_slot"
	snap, err := OpenSnapshot(ctx, srcURL, slot, false)
	if err != nil {
		t.Fatal(err)
	}
	snap.Close(ctx)
	t.Cleanup(func() { DropSlot(context.Background(), src, slot) })

	// 400 source transactions, each one statement, in order: an insert,
	// then updates and deletes of rows earlier ones wrote.
	const txs = 400
	for i := 1; i <= txs; i++ {
		switch {
		case i%5 == 0:
			mustExec(t, src, "DELETE FROM orders WHERE id = $1", i-3)
		case i%3 == 0:
			mustExec(t, src, "UPDATE orders SET note = note || ' updated' WHERE id = $1", i-1)
		default:
			mustExec(t, src, "INSERT INTO orders VALUES ($1, $2, $3)", i*31, i, "row")
		}
	}
	var end pglogrepl.LSN
	if err := src.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&end); err != nil {
		t.Fatal(err)
	}
	applied := 0
	var writes atomic.Int64
	s := &Stream{
		Workflow: "wf5", Source: "src", SourceConnString: srcURL, Slot: slot, Publication: "wf5_pub",
		Tables: []StreamTable{{Table: table, Placement: placement}}, StatusInterval: 200 * time.Millisecond, StopAt: end,
		Targets:    []Target{{"t1", countingConn(t, targetURLs["t1"], &writes)}, {"t2", countingConn(t, targetURLs["t2"], &writes)}},
		afterApply: func(int, pglogrepl.LSN) { applied++ },
	}
	if err := s.Run(ctx); err != nil {
		t.Fatal(err)
	}
	want := rowsOf(t, src, "")
	got := append(rowsOf(t, connect(t, targetURLs["t1"]), ""), rowsOf(t, connect(t, targetURLs["t2"]), "")...)
	slices.Sort(got)
	slices.Sort(want)
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("targets hold %d rows, source %d, or they differ", len(got), len(want))
	}
	t.Logf("%d source transactions applied in %d target transactions, %d writes to the targets", txs, applied, writes.Load())
	if applied > txs/10 {
		t.Errorf("%d source transactions took %d target transactions: they are not batched", txs, applied)
	}
	// A batch's changes go in one pipeline, not one round trip each:
	// about five writes per batch (begin, origin setup, the changes,
	// commit), whatever its size.
	if writes.Load() > int64(10*applied+20) {
		t.Errorf("%d writes to the targets for %d batches of %d source transactions: the changes are not pipelined", writes.Load(), applied, txs)
	}
}

// countingConn connects to a target and counts the writes to its socket.
func countingConn(t *testing.T, url string, writes *atomic.Int64) *pgx.Conn {
	t.Helper()
	cfg, err := pgx.ParseConfig(url)
	if err != nil {
		t.Fatal(err)
	}
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return &writeCounter{Conn: c, writes: writes}, nil
	}
	conn, err := pgx.ConnectConfig(testCtx(t), cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

type writeCounter struct {
	net.Conn
	writes *atomic.Int64
}

func (w *writeCounter) Write(b []byte) (int, error) {
	w.writes.Add(1)
	return w.Conn.Write(b)
}
