package replicator

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
)

// diffFixture is a source and two targets holding shop.public.orders, the
// targets filled by the replicator's own copy.
type diffFixture struct {
	placement *topo.Placement
	table     *Table
	src       *pgx.Conn
	targets   map[string]*pgx.Conn // t1, t2
	urls      map[string]string    // src, t1, t2
}

func newDiffFixture(t testing.TB, prefix string, rows int) *diffFixture {
	t.Helper()
	top, err := topo.Parse([]byte(moveTopology))
	if err != nil {
		t.Fatal(err)
	}
	f := &diffFixture{placement: top.Resolve("shop", "public", "orders"), targets: map[string]*pgx.Conn{}, urls: map[string]string{}}
	for _, name := range []string{"src", "t1", "t2"} {
		f.urls[name] = createDatabase(t, prefix+"_"+name)
		c := connect(t, f.urls[name])
		mustExec(t, c, ordersDDL)
		if name == "src" {
			f.src = c
			continue
		}
		f.targets[name] = c
		if err := EnsureProgressTable(testCtx(t), c); err != nil {
			t.Fatal(err)
		}
	}
	insertOrders(t, f.src, 1, rows)
	// Source rows with an empty note, against which a target's NULL must
	// differ, as a target's '' against a source's NULL.
	mustExec(t, f.src, "UPDATE orders SET note = '' WHERE id % 100 = 1")
	ctx := testCtx(t)
	if f.table, err = DescribeTable(ctx, f.src, "public", "orders", "customer_id"); err != nil {
		t.Fatal(err)
	}
	return f
}

// copyAll copies the source to the targets from a REPEATABLE READ
// snapshot: the diff tests need the rows where the copy puts them.
func (f *diffFixture) copyAll(t testing.TB) {
	t.Helper()
	ctx := testCtx(t)
	read, err := f.src.BeginTx(ctx, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly})
	if err != nil {
		t.Fatal(err)
	}
	defer read.Rollback(context.Background())
	c := &Copier{Workflow: "vd", Source: "src", Snapshot: &Snapshot{LSN: 1}, Read: read, BatchRows: 300,
		Targets: []Target{{"t1", f.targets["t1"]}, {"t2", f.targets["t2"]}}}
	if _, err := c.CopyTable(ctx, f.table, f.placement); err != nil {
		t.Fatal(err)
	}
}

// differ opens a diff transaction on each side, on connections of its own,
// closed when the test ends.
func (f *diffFixture) differ(t testing.TB, chunkRows int) *Differ {
	t.Helper()
	ctx := testCtx(t)
	side := func(shard string) DiffSide {
		tx, err := BeginDiffRead(ctx, connect(t, f.urls[shard]), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(context.Background()) })
		return DiffSide{Shard: shard, Read: tx}
	}
	return &Differ{Table: f.table, Placement: f.placement, ChunkRows: chunkRows,
		Sources: []DiffSide{side("src")}, Targets: []DiffSide{side("t1"), side("t2")}}
}

// owner returns the target that owns a customer_id, and the other one.
func (f *diffFixture) owner(t *testing.T, customerID int64) (owner, other string) {
	t.Helper()
	_, shard, err := f.placement.RouteInt(customerID)
	if err != nil {
		t.Fatal(err)
	}
	if shard == "t1" {
		return "t1", "t2"
	}
	return "t2", "t1"
}

// sourceRow returns the source row of an id: its key, its customer_id and
// its columns as jsonb, for copying it elsewhere.
func (f *diffFixture) sourceRow(t *testing.T, id int) (key []string, customerID int64, doc string) {
	t.Helper()
	var tenant string
	if err := f.src.QueryRow(testCtx(t), "SELECT tenant, customer_id, to_jsonb(o)::text FROM orders o WHERE id = $1", id).
		Scan(&tenant, &customerID, &doc); err != nil {
		t.Fatal(err)
	}
	return []string{tenant, fmt.Sprint(id)}, customerID, doc
}

// put writes a row given as jsonb on a target, all copied columns.
func (f *diffFixture) put(t *testing.T, shard, doc string) {
	t.Helper()
	cols := f.table.columnList()
	mustExec(t, f.targets[shard], "INSERT INTO orders ("+cols+") SELECT "+cols+" FROM jsonb_populate_record(NULL::orders, $1::jsonb)", doc)
}

func diffStrings(ds []Difference) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = fmt.Sprintf("%s %q on %s %v", d.Kind, d.Key, d.Shard, d.Columns)
	}
	slices.Sort(out)
	return out
}

func TestDiffReportsEachKindOfDifference(t *testing.T) {
	f := newDiffFixture(t, "vdiff", 1500)
	f.copyAll(t)
	ctx := testCtx(t)

	clean, err := f.differ(t, 100).Diff(ctx, DiffReport{})
	if err != nil {
		t.Fatal(err)
	}
	if !clean.Done || clean.Total() != 0 || len(clean.Differences) != 0 || clean.DifferingChunks != 0 {
		t.Fatalf("a clean copy: %+v", clean)
	}
	if clean.SourceRows != 1500 || clean.TargetRows != 1500 || clean.Chunks < 15 {
		t.Fatalf("a clean copy compared %d source and %d target rows in %d chunks, want 1500, 1500, 15 or more",
			clean.SourceRows, clean.TargetRows, clean.Chunks)
	}

	// A row routed to a shard the diff was not given is an error (55000),
	// and the report returned is the one before the failed chunk.
	partial := f.differ(t, 100)
	partial.Targets = partial.Targets[:1]
	partial.MaxChunks = 2
	before, err := partial.Diff(ctx, DiffReport{})
	if pgerr.Code(err) != pgerr.ObjectNotInPrerequisiteState {
		t.Fatalf("a diff missing target t2: %v, want 55000", err)
	}
	if before.Chunks != 0 || before.SourceRows != 0 || before.After != nil || before.Total() != 0 {
		t.Fatalf("after a failed first chunk: %+v, want nothing compared", before)
	}

	// One difference of each kind, each on a different key.
	var want []Difference
	{ // missing: deleted on its owner
		key, cust, _ := f.sourceRow(t, 10)
		owner, _ := f.owner(t, cust)
		mustExec(t, f.targets[owner], "DELETE FROM orders WHERE id = 10")
		want = append(want, Difference{Kind: DiffMissing, Key: key, Shard: owner})
	}
	{ // extra: a row on its owner that no source has
		key, cust, doc := f.sourceRow(t, 11)
		owner, _ := f.owner(t, cust)
		doc = strings.Replace(doc, `"id": 11,`, `"id": 900011,`, 1)
		f.put(t, owner, doc)
		want = append(want, Difference{Kind: DiffExtra, Key: []string{key[0], "900011"}, Shard: owner})
	}
	{ // changed: price, and a TOASTed note
		key, cust, _ := f.sourceRow(t, 120)
		owner, _ := f.owner(t, cust)
		mustExec(t, f.targets[owner], "UPDATE orders SET price = price + 0.01, note = note || '.' WHERE id = 120")
		want = append(want, Difference{Kind: DiffChanged, Key: key, Shard: owner, Columns: []string{"price", "note"}})
	}
	{ // NULL on the source, '' on the target
		key, cust, _ := f.sourceRow(t, 25)
		owner, _ := f.owner(t, cust)
		mustExec(t, f.targets[owner], "UPDATE orders SET note = '' WHERE id = 25 AND note IS NULL")
		want = append(want, Difference{Kind: DiffChanged, Key: key, Shard: owner, Columns: []string{"note"}})
	}
	{ // '' on the source, NULL on the target
		key, cust, _ := f.sourceRow(t, 301)
		owner, _ := f.owner(t, cust)
		mustExec(t, f.targets[owner], "UPDATE orders SET note = NULL WHERE id = 301 AND note = ''")
		want = append(want, Difference{Kind: DiffChanged, Key: key, Shard: owner, Columns: []string{"note"}})
	}
	{ // a stray copy on the target that does not own it
		key, cust, doc := f.sourceRow(t, 40)
		_, other := f.owner(t, cust)
		f.put(t, other, doc)
		want = append(want, Difference{Kind: DiffWrongShard, Key: key, Shard: other})
	}
	{ // moved to the wrong target: all targets together hold the same
		// rows as the source, only the per-target comparison sees it
		key, cust, doc := f.sourceRow(t, 777)
		owner, other := f.owner(t, cust)
		mustExec(t, f.targets[owner], "DELETE FROM orders WHERE id = 777")
		f.put(t, other, doc)
		want = append(want, Difference{Kind: DiffWrongShard, Key: key, Shard: other},
			Difference{Kind: DiffMissing, Key: key, Shard: owner})
	}
	{ // a row on a wrong target that no source has
		key, cust, doc := f.sourceRow(t, 1400)
		_, other := f.owner(t, cust)
		doc = strings.Replace(doc, `"id": 1400,`, `"id": 901400,`, 1)
		f.put(t, other, doc)
		want = append(want, Difference{Kind: DiffWrongShard, Key: []string{key[0], "901400"}, Shard: other})
	}

	full, err := f.differ(t, 100).Diff(ctx, DiffReport{})
	if err != nil {
		t.Fatal(err)
	}
	if got, w := diffStrings(full.Differences), diffStrings(want); !slices.Equal(got, w) {
		t.Fatalf("differences:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(w, "\n"))
	}
	wantCounts := map[DiffKind]int64{DiffMissing: 2, DiffExtra: 1, DiffChanged: 3, DiffWrongShard: 3}
	if !reflect.DeepEqual(full.Counts, wantCounts) || full.Unlisted != 0 || !full.Done {
		t.Fatalf("counts %v, unlisted %d, done %v; want %v, 0, true", full.Counts, full.Unlisted, full.Done, wantCounts)
	}
	if full.DifferingChunks < 2 || full.DifferingChunks > 8 || full.DifferingChunks >= full.Chunks {
		t.Fatalf("%d of %d chunks differ: only the chunks with differences should", full.DifferingChunks, full.Chunks)
	}
	t.Logf("%d chunks, %d differing, %d source rows, %d target rows", full.Chunks, full.DifferingChunks, full.SourceRows, full.TargetRows)

	// Stopped every 3 chunks, its state through JSON, resumed on new
	// snapshots: the same report.
	var resumed DiffReport
	for steps := 0; !resumed.Done; steps++ {
		if steps > 100 {
			t.Fatal("the resumed diff does not finish")
		}
		d := f.differ(t, 100)
		d.MaxChunks = 3
		next, err := d.Diff(ctx, resumed)
		if err != nil {
			t.Fatal(err)
		}
		if !next.Done && next.Chunks != resumed.Chunks+3 {
			t.Fatalf("a step compared %d chunks, want 3", next.Chunks-resumed.Chunks)
		}
		raw, err := json.Marshal(next)
		if err != nil {
			t.Fatal(err)
		}
		resumed = DiffReport{}
		if err := json.Unmarshal(raw, &resumed); err != nil {
			t.Fatal(err)
		}
	}
	if !reflect.DeepEqual(resumed, full) {
		t.Fatalf("resumed diff:\n%+v\none pass:\n%+v", resumed, full)
	}

	// The listing is bounded; the counts are not.
	d := f.differ(t, 100)
	d.MaxListed = 4
	bounded, err := d.Diff(ctx, DiffReport{})
	if err != nil {
		t.Fatal(err)
	}
	if len(bounded.Differences) != 4 || bounded.Unlisted != 5 || bounded.Total() != 9 {
		t.Fatalf("bounded to 4: %d listed, %d unlisted, %d in all; want 4, 5, 9",
			len(bounded.Differences), bounded.Unlisted, bounded.Total())
	}
}

// The acceptance test of the consistent point: a table copied and
// streamed while writers change it (rows moving shard among them) diffs
// clean, the writes going on all the while, before and after the point.
func TestDiffAtConsistentPointUnderWrites(t *testing.T) {
	f := newDiffFixture(t, "vdcp", 2000)
	ctx := testCtx(t)
	mustExec(t, f.src, "ALTER TABLE orders REPLICA IDENTITY FULL")
	mustExec(t, f.src, "CREATE PUBLICATION vdcp_pub FOR TABLE orders")
	const slot = "vdcp_slot"

	stop := make(chan struct{})
	var wg sync.WaitGroup
	writeErrs, writes := make([]error, 2), make([]int, 2)
	for w := range writeErrs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			conn, err := pgx.Connect(ctx, f.urls["src"])
			if err != nil {
				writeErrs[w] = err
				return
			}
			defer conn.Close(context.Background())
			writes[w], writeErrs[w] = writeChanges(ctx, conn, int64(w+1), 1000000, stop)
		}()
	}
	stopWriters := func() {
		select {
		case <-stop:
			return
		default:
		}
		close(stop)
		wg.Wait()
		for _, err := range writeErrs {
			if err != nil {
				t.Fatal(err)
			}
		}
	}
	defer stopWriters()

	snap, err := OpenSnapshot(ctx, f.urls["src"], slot, false)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { DropSlot(context.Background(), f.src, slot) })
	read, err := BeginSnapshotRead(ctx, connect(t, f.urls["src"]), snap)
	if err != nil {
		t.Fatal(err)
	}
	snap.Close(ctx)
	copier := &Copier{Workflow: "vdcp", Source: "src", Snapshot: snap, Read: read, BatchRows: 300,
		Targets: []Target{{"t1", connect(t, f.urls["t1"])}, {"t2", connect(t, f.urls["t2"])}}}
	if _, err := copier.CopyTable(ctx, f.table, f.placement); err != nil {
		t.Fatal(err)
	}
	read.Rollback(ctx)

	stream := func() *Stream {
		return &Stream{
			Workflow: "vdcp", Source: "src", SourceConnString: f.urls["src"], Slot: slot, Publication: "vdcp_pub",
			Tables: []StreamTable{{Table: f.table, Placement: f.placement}}, StatusInterval: 100 * time.Millisecond,
			Targets: []Target{{"t1", connect(t, f.urls["t1"])}, {"t2", connect(t, f.urls["t2"])}},
		}
	}
	runInBackground := func() (stopStream func()) {
		runCtx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		s := stream()
		go func() { done <- s.Run(runCtx) }()
		return func() {
			cancel()
			if err := <-done; !errors.Is(err, context.Canceled) {
				t.Fatalf("the stream stopped with %v", err)
			}
		}
	}
	stopStream := runInBackground()
	time.Sleep(time.Second)

	// The consistent point: stop the stream, export a source snapshot,
	// apply exactly up to it, snapshot the targets, release the stream.
	stopStream()
	srcRead, lsn, err := OpenDiffSnapshot(ctx, f.urls["src"], "vdcp_diff", connect(t, f.urls["src"]))
	if err != nil {
		t.Fatal(err)
	}
	defer srcRead.Rollback(context.Background())
	catchUp := stream()
	catchUp.StopAt = lsn
	if err := catchUp.Run(ctx); err != nil {
		t.Fatal(err)
	}
	d := &Differ{Table: f.table, Placement: f.placement, ChunkRows: 150, Sources: []DiffSide{{"src", srcRead}}}
	for _, shard := range []string{"t1", "t2"} {
		tx, err := BeginDiffRead(ctx, connect(t, f.urls[shard]), nil)
		if err != nil {
			t.Fatal(err)
		}
		defer tx.Rollback(context.Background())
		d.Targets = append(d.Targets, DiffSide{shard, tx})
	}
	stopStream = runInBackground()

	report, err := d.Diff(ctx, DiffReport{})
	if err != nil {
		t.Fatal(err)
	}
	stopStream()
	stopWriters()
	var inSnapshot int64
	if err := srcRead.QueryRow(ctx, "SELECT count(*) FROM orders").Scan(&inSnapshot); err != nil {
		t.Fatal(err)
	}
	if !report.Done || report.Total() != 0 || report.SourceRows != inSnapshot || report.TargetRows != inSnapshot {
		t.Fatalf("at %s (%d rows in the snapshot): %+v", lsn, inSnapshot, report)
	}
	if writes[0]+writes[1] < 50 {
		t.Fatalf("only %d source transactions: the diff was not under writes", writes[0]+writes[1])
	}
	t.Logf("clean at %s: %d rows in %d chunks, %d source transactions around it", lsn, report.SourceRows, report.Chunks, writes[0]+writes[1])
}

// BenchmarkDiffCleanRows diffs a clean copy of 20000 rows (TOASTed values
// among them) over two targets: every chunk compared by count and sums,
// none row by row. It reports the source rows compared per second.
func BenchmarkDiffCleanRows(b *testing.B) {
	f := newDiffFixture(b, "vdbench", 20000)
	f.copyAll(b)
	ctx := testCtx(b)
	b.ResetTimer()
	var rows int64
	for i := 0; i < b.N; i++ {
		report, err := f.differ(b, DefaultDiffChunkRows).Diff(ctx, DiffReport{})
		if err != nil {
			b.Fatal(err)
		}
		if report.Total() != 0 {
			b.Fatalf("a clean copy: %+v", report)
		}
		rows += report.SourceRows
	}
	b.ReportMetric(float64(rows)/b.Elapsed().Seconds(), "rows/s")
}

// A reshard's sources: the rows split over two source shards add up on
// the targets, and a key on both sources is reported.
func TestDiffWithTwoSources(t *testing.T) {
	f := newDiffFixture(t, "vdtwo", 800)
	f.copyAll(t)
	ctx := testCtx(t)
	f.urls["src2"] = createDatabase(t, "vdtwo_src2")
	src2 := connect(t, f.urls["src2"])
	mustExec(t, src2, ordersDDL)
	var even string
	if err := f.src.QueryRow(ctx, "SELECT jsonb_agg(to_jsonb(o))::text FROM orders o WHERE id % 2 = 0").Scan(&even); err != nil {
		t.Fatal(err)
	}
	cols := f.table.columnList()
	mustExec(t, src2, "INSERT INTO orders ("+cols+") SELECT "+cols+" FROM jsonb_populate_recordset(NULL::orders, $1::jsonb)", even)
	mustExec(t, f.src, "DELETE FROM orders WHERE id % 2 = 0")

	differ := func() *Differ {
		d := f.differ(t, 64)
		tx, err := BeginDiffRead(ctx, connect(t, f.urls["src2"]), nil)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { tx.Rollback(context.Background()) })
		d.Sources = append(d.Sources, DiffSide{"src2", tx})
		return d
	}
	clean, err := differ().Diff(ctx, DiffReport{})
	if err != nil {
		t.Fatal(err)
	}
	if !clean.Done || clean.Total() != 0 || clean.SourceRows != 800 || clean.TargetRows != 800 {
		t.Fatalf("two sources of a clean copy: %+v", clean)
	}

	key, _, doc := f.sourceRow(t, 33)
	mustExec(t, src2, "INSERT INTO orders ("+cols+") SELECT "+cols+" FROM jsonb_populate_record(NULL::orders, $1::jsonb)", doc)
	dup, err := differ().Diff(ctx, DiffReport{})
	if err != nil {
		t.Fatal(err)
	}
	want := []string{fmt.Sprintf("%s %q on src2 []", DiffSourceDuplicate, key)}
	if got := diffStrings(dup.Differences); !slices.Equal(got, want) {
		t.Fatalf("a key on both sources: %v, want %v", got, want)
	}
}
