package replicator

import (
	"context"
	"errors"
	"testing"

	"github.com/jackc/pgx/v5"
)

// A copy stopped at about a third of the table (between two targets'
// commits of a batch: the worst case, where the resumed copy reads that
// batch again for the target that lacks it) and again in its last batch
// (before any target committed it: the batch in flight is lost and read
// again)
// resumes each time where the targets' progress rows say. The counters
// show it: in all, one batch more was read per stop than an uninterrupted
// copy reads, every target committed each batch exactly once, and the
// targets hold exactly the source's rows.
func TestCopyTableKilledAtAThirdAndAtTheLastBatch(t *testing.T) {
	const (
		rows      = 2900
		batchRows = 250 // copyOnce's
		// An uninterrupted copy reads 11 full batches and a last one of
		// 150 rows, which ends it.
		wholeCopy = 12
		firstStop = 4 // t1 commits batch 4, t2 does not
	)
	srcURL := createDatabase(t, "kill_src")
	targetURLs := map[string]string{"t1": createDatabase(t, "kill_t1"), "t2": createDatabase(t, "kill_t2")}
	src := connect(t, srcURL)
	mustExec(t, src, ordersDDL)
	insertOrders(t, src, 1, rows)
	targets := map[string]*pgx.Conn{}
	for name, u := range targetURLs {
		c := connect(t, u)
		mustExec(t, c, ordersDDL)
		if err := EnsureProgressTable(testCtx(t), c); err != nil {
			t.Fatal(err)
		}
		targets[name] = c
	}
	const slot = "wfkill_copy_src"
	t.Cleanup(func() { DropSlot(context.Background(), src, slot) })

	// Attempt 1 stops after t1 (target 0) committed batch 4.
	first, err := copyOnce(t, "wfkill", srcURL, targetURLs, slot, false, func(cancel func(), batch, target int, committed bool) {
		if batch == firstStop && target == 0 && committed {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("attempt 1 returned %v, want a cancellation", err)
	}
	// Attempt 2 reads batch 4 again for t2, then 5 to 12: it stops in its
	// 9th batch, the table's last, before t1 commits it.
	lastInAttempt2 := wholeCopy - firstStop + 1
	second, err := copyOnce(t, "wfkill", srcURL, targetURLs, slot, true, func(cancel func(), batch, target int, committed bool) {
		if batch == lastInAttempt2 && target == 0 && !committed {
			cancel()
		}
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("attempt 2 returned %v, want a cancellation", err)
	}
	third, err := copyOnce(t, "wfkill", srcURL, targetURLs, slot, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("batches read: %d, %d, %d (reread %d, %d, %d); an uninterrupted copy reads %d",
		first.Batches, second.Batches, third.Batches, first.RereadBatches, second.RereadBatches, third.RereadBatches, wholeCopy)
	if first.Batches != firstStop || second.Batches != lastInAttempt2 || third.Batches != 1 {
		t.Fatalf("attempts read %d, %d and %d batches: they did not stop and resume where the test stopped them",
			first.Batches, second.Batches, third.Batches)
	}
	const stops = 2
	if repeated := first.Batches + second.Batches + third.Batches - wholeCopy; repeated > stops {
		t.Fatalf("%d batches read twice over %d stops: more than one per stop", repeated, stops)
	}
	if second.RereadBatches != 1 || third.RereadBatches != 0 {
		t.Fatalf("reread batches %d and %d, want 1 (t1 held batch 4) and 0", second.RereadBatches, third.RereadBatches)
	}

	// The durable counters, on each target, agree.
	var total int
	for name, tg := range targets {
		counters, err := ReadCopyCounters(testCtx(t), tg, "wfkill", "src", "public.orders")
		if err != nil {
			t.Fatal(err)
		}
		held := int64(len(rowsOf(t, tg, "")))
		total += int(held)
		t.Logf("%s: %+v, %d rows held", name, counters, held)
		wantReread := int64(0)
		if name == "t2" {
			wantReread = 1
		}
		if counters.Stretches != 3 || counters.Batches != wholeCopy || counters.Rows != held || counters.RereadBatches != wantReread || !counters.Done {
			t.Fatalf("%s: counters %+v, holding %d rows; want 3 stretches, %d batches each committed once, %d rows, %d reread, done",
				name, counters, held, wholeCopy, held, wantReread)
		}
	}
	want := rowsOf(t, src, "")
	if total != len(want) {
		t.Fatalf("targets hold %d rows, the source %d", total, len(want))
	}
	got := map[string]bool{}
	for _, tg := range targets {
		for _, r := range rowsOf(t, tg, "") {
			got[r] = true
		}
	}
	for _, r := range want {
		if !got[r] {
			t.Fatalf("source row %s is not on the targets", r)
		}
	}
}
