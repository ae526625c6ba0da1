package replicator

import (
	"context"
	"testing"
	"time"
)

// TestTemporarySlotWaitsForTheAttemptBefore: a resumed copy opens its
// temporary slot while the slot of the same name, held by the attempt
// before it, is still going away (its connection closed, its walsender
// not yet gone); the fresh-clone CI saw 42710 "already exists" there.
// The new attempt waits for the old slot instead, and gets its own.
func TestTemporarySlotWaitsForTheAttemptBefore(t *testing.T) {
	srcURL := createDatabase(t, "tmpslot_src")
	ctx := testCtx(t)
	const slot = "tmpslot_resume"
	old, err := OpenSnapshot(ctx, srcURL, slot, true)
	if err != nil {
		t.Fatal(err)
	}
	released := make(chan time.Time, 1)
	go func() {
		time.Sleep(500 * time.Millisecond)
		released <- time.Now()
		old.Close(context.Background())
	}()
	snap, err := OpenSnapshot(ctx, srcURL, slot, true)
	if err != nil {
		t.Fatalf("the second attempt's temporary slot: %v", err)
	}
	defer snap.Close(context.Background())
	if at := <-released; time.Now().Before(at) {
		t.Fatal("the second slot was made while the first was held")
	}
	if snap.Name == old.Name || snap.Slot != slot {
		t.Fatalf("snapshot %s of slot %s, after %s", snap.Name, snap.Slot, old.Name)
	}
}
