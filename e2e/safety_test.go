package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/topo/store"
)

// retryable reports whether a client may run a failed write again: the
// connection failure class (whether the write committed is unknown, as
// after any lost connection), the router's own "primary is changing"
// (57P03) or the server shutting down (57P01).
func retryable(code string) bool {
	return strings.HasPrefix(code, "08") || code == "57P01" || code == "57P03"
}

// TestHungPrimary: every process of the primary's Postgres is stopped
// (SIGSTOP) while its sidecar stays up, under 4 writers through the
// router. The admin fails it over; the statements left waiting on the
// hung primary end with a connection failure as soon as the new primary
// is published, and writes succeed again within 5 s of the hang. No
// acknowledged write is lost, and the old primary, woken, rejoins.
func TestHungPrimary(t *testing.T) {
	startWorker(t, "e2e-hung", true)
	before := settled(t)
	addr := cluster.Info().Router
	ensureTable(t, addr)
	w := startWriters(t, "hung", addr, 4, 5_000_000)
	time.Sleep(2 * time.Second)

	const hangFor = 15 * time.Second
	hungAt := time.Now()
	w.disturb(hungAt)
	resume, err := cluster.Hang(before.Primary)
	if err != nil {
		t.Fatal(err)
	}
	resumed := false
	wake := func() {
		if !resumed {
			resumed = true
			if err := resume(); err != nil {
				t.Error(err)
			}
		}
	}
	t.Cleanup(wake)
	var published time.Time
	eventually(t, 30*time.Second, "a new primary is published", func() error {
		if st := shardState(t); st.Primary == before.Primary {
			return fmt.Errorf("primary still %s", st.Primary)
		}
		published = time.Now()
		return nil
	})
	eventually(t, 20*time.Second, "every writer has a write acknowledged after the publication", func() error {
		if !w.ackedAfter(published) {
			return fmt.Errorf("%v", w)
		}
		return nil
	})
	writable := time.Now()
	// Writers keep going on the new primary while the old one stays
	// hung: a statement still waiting on it would show as a gap.
	time.Sleep(time.Until(hungAt.Add(hangFor)))
	w.finish()
	wake()
	after := shardState(t)
	t.Logf("primary %s hung (SIGSTOP) for %v under 4 writers (sync durability, 2 replicas); %s published %v after the hang began; every writer acknowledged again by %v",
		before.Primary, hangFor, after.Primary, published.Sub(hungAt).Round(time.Millisecond), writable.Sub(hungAt).Round(time.Millisecond))
	t.Logf("%v", w)
	if gap := w.longestGap(); gap > 5*time.Second {
		t.Errorf("a writer went %v without an acknowledged write (want under 5 s)", gap.Round(time.Millisecond))
	}
	checkErrorsRetryable(t, w)
	checkAcknowledgedPresent(t, addr, w)
	awaitRejoined(t, before.Primary, 90*time.Second)
	settled(t)
}

// TestPrimaryRestartedInPlace: kill -9 of the primary's postmaster alone
// (its sidecar stays) under 4 writers through the router: pgmanager
// restarts it in place, no failover follows, and writes, which under
// sync durability also wait for a replica to reconnect, are back within
// 2 s (asserted: 3 s). No acknowledged write is lost.
func TestPrimaryRestartedInPlace(t *testing.T) {
	startWorker(t, "e2e-restart", true)
	before := settled(t)
	addr := cluster.Info().Router
	ensureTable(t, addr)
	w := startWriters(t, "restart", addr, 4, 6_000_000)
	time.Sleep(2 * time.Second)

	// Crash recovery replays the WAL written since the last checkpoint,
	// which earlier tests leave plenty of, and on this shared machine's
	// disk that alone can outlast the detection window. This test is
	// about the restart and the replicas' return, so it starts from a
	// checkpoint.
	checkpoint(t, before.Primary)
	killed := time.Now()
	w.disturb(killed)
	if err := cluster.KillPostgres(before.Primary); err != nil {
		t.Fatal(err)
	}
	time.Sleep(time.Second) // the writers fail or wait meanwhile
	eventually(t, 30*time.Second, "every writer has a write acknowledged after the kill", func() error {
		if !w.ackedAfter(killed.Add(time.Second)) {
			return fmt.Errorf("%v", w)
		}
		return nil
	})
	time.Sleep(2 * time.Second)
	w.finish()
	after := shardState(t)
	t.Logf("postmaster of primary %s killed (sync durability, 2 replicas, 4 writers): %v", before.Primary, w)
	if after.Primary != before.Primary || after.Term != before.Term {
		t.Errorf("the shard failed over (%+v -> %+v): a Postgres restarted in place should not be", before, after)
	}
	// The goal is 2 s (1.42 s measured); the bound leaves room for a
	// slower machine and still fails the 5 s a replica waited before
	// retrying its primary.
	if gap := w.longestGap(); gap > 3*time.Second {
		t.Errorf("a writer went %v without an acknowledged write (want under 2 s, at most 3)", gap.Round(time.Millisecond))
	}
	checkErrorsRetryable(t, w)
	checkAcknowledgedPresent(t, addr, w)
	settled(t)
}

// checkErrorsRetryable: every write that failed told its client to retry.
func checkErrorsRetryable(t *testing.T, w *writers) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	for code, n := range w.codes {
		if !retryable(code) {
			t.Errorf("%d writes failed with SQLSTATE %q, which does not tell the client to retry", n, code)
		}
	}
}

// checkpoint runs CHECKPOINT on an instance's Postgres directly.
func checkpoint(t *testing.T, id string) {
	t.Helper()
	recs, err := cluster.Store().ListRecords(context.Background(), store.KindSidecar)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.InstanceID != id {
			continue
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@%s/postgres?sslmode=disable", r.PostgresAddr))
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close(ctx)
		if _, err := conn.Exec(ctx, "CHECKPOINT"); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Fatalf("no sidecar record for %s", id)
}
