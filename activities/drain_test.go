package activities_test

import (
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/activities"
)

// DrainTransactions waits for a transaction open on the primary to end,
// and gives up after its wait with the count still open.
func TestDrainTransactions(t *testing.T) {
	ctx := testCtx(t)
	primary := currentPrimary(t)
	in := activities.DrainInput{Shard: shard, Instance: primary, Wait: 300 * time.Millisecond}
	if open := must[int](t, acts.DrainTransactions, in); open != 0 {
		t.Fatalf("with no transaction open: %d open", open)
	}
	c, err := pgx.Connect(ctx, nodes[primary].ConnConfig("", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	tx, err := c.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(ctx, "SELECT 1"); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if open := must[int](t, acts.DrainTransactions, in); open != 1 || time.Since(start) < 300*time.Millisecond {
		t.Fatalf("with one transaction open: %d open after %v, want 1 after the 300ms wait", open, time.Since(start))
	}
	// The transaction ends while the activity waits.
	committed := make(chan error, 1)
	go func() {
		time.Sleep(300 * time.Millisecond)
		committed <- tx.Commit(ctx)
	}()
	defer func() { <-committed }() // before the connection closes
	in.Wait = 10 * time.Second
	start = time.Now()
	if open := must[int](t, acts.DrainTransactions, in); open != 0 || time.Since(start) > 5*time.Second {
		t.Fatalf("after the commit: %d open after %v, want 0 soon after the commit", open, time.Since(start))
	}
}

// With a quiet time, the drain waits while statements keep arriving
// (a router that has not seen the buffer signal yet), and returns as
// soon as they stop; on an idle instance it returns at once.
func TestDrainWaitsForQuiet(t *testing.T) {
	ctx := testCtx(t)
	primary := currentPrimary(t)
	in := activities.DrainInput{Shard: shard, Instance: primary, Wait: 5 * time.Second, Quiet: 300 * time.Millisecond}
	time.Sleep(in.Quiet) // statements of earlier tests
	start := time.Now()
	if open := must[int](t, acts.DrainTransactions, in); open != 0 || time.Since(start) > 2*time.Second {
		t.Fatalf("idle: %d open after %v", open, time.Since(start))
	}
	c, err := pgx.Connect(ctx, nodes[primary].ConnConfig("", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close(ctx)
	// A client that sends a short statement every 50 ms for 1.5 s.
	busyUntil := time.Now().Add(1500 * time.Millisecond)
	done := make(chan error, 1)
	go func() {
		for time.Now().Before(busyUntil) {
			if _, err := c.Exec(ctx, "SELECT 1"); err != nil {
				done <- err
				return
			}
			time.Sleep(50 * time.Millisecond)
		}
		done <- nil
	}()
	time.Sleep(100 * time.Millisecond)
	if open := must[int](t, acts.DrainTransactions, in); open != 0 {
		t.Fatalf("after the client stopped: %d open", open)
	}
	if time.Now().Before(busyUntil) {
		t.Errorf("the drain returned %v before the client's statements stopped", busyUntil.Sub(time.Now()).Round(time.Millisecond))
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
