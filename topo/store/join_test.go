package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// TestShardJoinLock: a second holder waits until the first unlocks, and
// a creation claimed by one instance is reported to the next.
func TestShardJoinLock(t *testing.T) {
	endpoints := etcdembed.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s, err := store.Dial(ctx, endpoints, "join")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	unlock, err := s.LockShardJoin(ctx, "s1")
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan error, 1)
	go func() {
		u, err := s.LockShardJoin(ctx, "s1")
		if err == nil {
			u()
		}
		got <- err
	}()
	select {
	case err := <-got:
		t.Fatalf("a second holder took the lock while the first held it: %v", err)
	case <-time.After(500 * time.Millisecond):
	}
	unlock()
	unlock() // a second call does nothing
	select {
	case err := <-got:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the lock was not released")
	}
	if c, err := s.ClaimShardCreation(ctx, "s1", "a"); err != nil || c != "a" {
		t.Fatalf("first claim: %q %v", c, err)
	}
	if c, err := s.ClaimShardCreation(ctx, "s1", "b"); err != nil || c != "a" {
		t.Fatalf("second claim: %q %v, want a", c, err)
	}
}
