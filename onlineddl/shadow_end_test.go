package onlineddl

import (
	"testing"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/workflows"
)

// leftovers counts what a migration may leave on a shard: shadow and old
// tables, slots, publications, origins, copy progress.
func leftovers(t *testing.T, conn *pgx.Conn) map[string]int64 {
	t.Helper()
	out := map[string]int64{}
	for what, q := range map[string]string{
		"tables":        "SELECT count(*) FROM pg_class WHERE relkind = 'r' AND (relname LIKE '\\_tessera\\_shadow\\_%' OR relname LIKE '\\_tessera\\_old\\_%')",
		"slots":         "SELECT count(*) FROM pg_replication_slots WHERE slot_name LIKE 'tessera_ddl_%'",
		"publications":  "SELECT count(*) FROM pg_publication WHERE pubname LIKE 'tessera_ddl_%'",
		"origins":       "SELECT count(*) FROM pg_replication_origin WHERE roname LIKE 'tessera_ddl_%'",
		"copy progress": "SELECT count(*) FROM _tessera.copy_progress",
	} {
		if n := scalar[int64](t, conn, q); n > 0 {
			out[what] = n
		}
	}
	return out
}

func TestShadowCancelLeavesNothingAndCompleteKeepsEverythingWorking(t *testing.T) {
	a := newActivities(t, "sh", shadowTestDDL)
	ctx := testCtx(t)
	conn := shardConn(t, "sh", "s1")
	in := shadowInput(t, a, "ALTER TABLE orders ALTER COLUMN id TYPE bigint")

	// Cancelled after the copy: nothing is left, the table is as it was.
	for _, step := range []func() (workflows.ShadowResult, error){
		func() (workflows.ShadowResult, error) { return a.PrepareShadow(ctx, in) },
		func() (workflows.ShadowResult, error) { return a.CopyShadow(ctx, in) },
	} {
		if _, err := step(); err != nil {
			t.Fatal(err)
		}
	}
	if left := leftovers(t, conn); left["slots"] != 1 || left["tables"] != 1 {
		t.Fatalf("before the cancel: %v, want the shadow table and the forward slot", left)
	}
	if _, err := a.SwapShadow(ctx, workflows.ShadowInput{}); err == nil {
		t.Error("a swap without a migration succeeded")
	}
	res, err := a.CancelShadow(ctx, in)
	if err != nil || res.State != workflows.ShadowCancelled {
		t.Fatalf("cancel: %+v, %v", res, err)
	}
	if left := leftovers(t, conn); len(left) > 0 {
		t.Errorf("after the cancel: %v left", left)
	}
	if _, err := a.SwapShadow(ctx, in); err == nil {
		t.Error("a cancelled migration swapped")
	}
	checkSwapped(t, conn, "integer", "")

	// Another migration goes all the way: after Complete the old table
	// and the streams are gone, and what hung off the table works.
	in.MigrationID = "wf/run2"
	if _, err := a.PrepareShadow(ctx, in); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CopyShadow(ctx, in); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CompleteShadow(ctx, in); err == nil {
		t.Error("complete before the swap succeeded")
	}
	if _, err := retried(t, func() (workflows.ShadowResult, error) { return a.SwapShadow(ctx, in) }); err != nil {
		t.Fatal(err)
	}
	if _, err := a.CancelShadow(ctx, in); err == nil {
		t.Error("cancel after the swap succeeded")
	}
	if res, err := a.CompleteShadow(ctx, in); err != nil || res.State != workflows.ShadowCompleted {
		t.Fatalf("complete: %+v, %v", res, err)
	}
	if res, err := a.CompleteShadow(ctx, in); err != nil || !res.AlreadyDone {
		t.Errorf("complete again: %+v, %v; want already done", res, err)
	}
	if left := leftovers(t, conn); len(left) > 0 {
		t.Errorf("after Complete: %v left", left)
	}
	checkSwapped(t, conn, "bigint", "")
	if n := scalar[int64](t, conn, "SELECT count(*) FROM orders"); n != 20000 {
		t.Errorf("%d orders, want 20000", n)
	}
}
