package pgmanager

import (
	"testing"
)

func TestFence(t *testing.T) {
	t.Parallel()
	inst := startPrimary(t, "fence", nil)
	ctx := testCtx(t)
	execSQL(t, inst, "CREATE TABLE f (id int)")

	// A session in the middle of a write transaction.
	sess := dial(t, inst)
	if _, err := sess.Exec(ctx, "BEGIN; INSERT INTO f VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := inst.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sess.Exec(ctx, "INSERT INTO f VALUES (2); COMMIT"); err == nil {
		t.Fatal("a session opened before Fence could still write")
	}
	wantSQLState(t, tryExec(inst, "INSERT INTO f VALUES (3)"), "25006")
	if got := mustQuery(t, inst, "SELECT count(*)::text FROM f"); got != "0" {
		t.Fatalf("fenced table has %s rows; the open transaction must have been rolled back", got)
	}
	st, err := inst.Status(ctx)
	if err != nil || !st.Fenced {
		t.Fatalf("Status = %+v, %v; want Fenced", st, err)
	}

	// The fence survives a restart and a second Fence.
	if err := inst.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inst.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	wantSQLState(t, tryExec(inst, "INSERT INTO f VALUES (4)"), "25006")

	if err := inst.Unfence(ctx); err != nil {
		t.Fatal(err)
	}
	execSQL(t, inst, "INSERT INTO f VALUES (5)")
	if st, err := inst.Status(ctx); err != nil || st.Fenced {
		t.Fatalf("Status after Unfence = %+v, %v", st, err)
	}
}

// Fence leaves no WAL unflushed: walsenders send only flushed WAL, and a
// switchover's candidate must receive everything up to the position the
// fence reports. A read right after a checkpoint sets hint bits, which
// with data checksums logs full page images that nobody flushes until
// the WAL writer's next round.
func TestFenceFlushesTheWAL(t *testing.T) {
	t.Parallel()
	inst := startPrimary(t, "fence-flush", nil)
	ctx := testCtx(t)
	execSQL(t, inst, "CREATE TABLE h AS SELECT g AS id FROM generate_series(1, 10000) g")
	execSQL(t, inst, "CHECKPOINT")
	mustQuery(t, inst, "SELECT count(*)::text FROM h")
	if err := inst.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := inst.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	flushed, err := ParseLSN(mustQuery(t, inst, "SELECT pg_current_wal_flush_lsn()::text"))
	if err != nil {
		t.Fatal(err)
	}
	if flushed < st.CurrentLSN {
		t.Errorf("after Fence, WAL is flushed up to %s, short of the reported position %s", flushed, st.CurrentLSN)
	}

	// Fencing again writes no WAL: replicas still streaming from a
	// deposed primary whose sidecar fences it again would receive it
	// past the new primary's fork point.
	before := mustQuery(t, inst, "SELECT pg_current_wal_insert_lsn()::text")
	if err := inst.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	if after := mustQuery(t, inst, "SELECT pg_current_wal_insert_lsn()::text"); after != before {
		t.Errorf("fencing a fenced instance wrote WAL: %s, then %s", before, after)
	}
}
