package storetest

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/tesseradb/tessera/topo/store"
)

func testShardStateUpdate(t *testing.T, s *store.Store) {
	ctx := testContext(t)
	st, err := s.GetShardState(ctx, "shard-1")
	if err != nil || st.Revision != 0 || st.Shard != "shard-1" || st.Primary != "" {
		t.Fatalf("GetShardState of an unknown shard = %+v, %v; want an empty state", st, err)
	}
	until := time.Now().Add(time.Minute).Truncate(time.Millisecond)
	written, err := s.UpdateShardState(ctx, "shard-1", func(st *store.ShardState) error {
		st.Primary, st.Term = "pg-1", 1
		st.Buffer = &store.BufferSignal{Reason: "switchover", Until: until}
		return nil
	})
	if err != nil || written.Revision == 0 {
		t.Fatalf("UpdateShardState = %+v, %v", written, err)
	}
	got, err := s.GetShardState(ctx, "shard-1")
	if err != nil || got.Primary != "pg-1" || got.Term != 1 || !got.Buffering(time.Now()) || got.Revision != written.Revision {
		t.Fatalf("stored state = %+v, %v; want primary pg-1, term 1, buffering, revision %d", got, err, written.Revision)
	}
	if got.Buffering(until.Add(time.Second)) {
		t.Fatal("a buffer signal must end at its Until")
	}
	if got.Durability.OrDefault() != store.DurabilitySync {
		t.Fatalf("default durability = %q, want sync", got.Durability.OrDefault())
	}

	// An aborted change writes nothing; a bad policy is refused.
	abort := errors.New("abort")
	if _, err := s.UpdateShardState(ctx, "shard-1", func(st *store.ShardState) error { st.Primary = "x"; return abort }); !errors.Is(err, abort) {
		t.Fatalf("aborted update = %v, want %v", err, abort)
	}
	if _, err := s.UpdateShardState(ctx, "shard-1", func(st *store.ShardState) error { st.Durability = "maybe"; return nil }); err == nil {
		t.Fatal("durability \"maybe\" was accepted")
	}
	if got, _ := s.GetShardState(ctx, "shard-1"); got.Primary != "pg-1" || got.Durability != "" {
		t.Fatalf("refused updates changed the state: %+v", got)
	}

	// Concurrent increments all land: the compare-and-swap retries.
	var wg sync.WaitGroup
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.UpdateShardState(ctx, "shard-1", func(st *store.ShardState) error { st.Term++; return nil }); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if got, _ := s.GetShardState(ctx, "shard-1"); got.Term != 9 {
		t.Fatalf("term after 8 concurrent increments = %d, want 9", got.Term)
	}
}

func testWatchShardStates(t *testing.T, s *store.Store) {
	ctx := testContext(t)
	ch, err := s.WatchShardStates(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if first := <-ch; len(first) != 0 {
		t.Fatalf("first list = %+v, want none", first)
	}
	for _, shard := range []string{"b", "a"} {
		if _, err := s.UpdateShardState(ctx, shard, func(st *store.ShardState) error { st.Primary = shard + "-pg"; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// A document that is not a shard state is skipped.
	if _, err := s.Client().Put(ctx, s.ShardStateKey("c"), "{not json"); err != nil {
		t.Fatal(err)
	}
	timer := time.NewTimer(waitTime)
	defer timer.Stop()
	for {
		select {
		case list := <-ch:
			if len(list) == 2 && list[0].Shard == "a" && list[0].Primary == "a-pg" && list[1].Primary == "b-pg" {
				all, err := s.ListShardStates(ctx)
				if err != nil || len(all) != 2 {
					t.Fatalf("ListShardStates = %+v, %v; want a and b", all, err)
				}
				return
			}
		case <-timer.C:
			t.Fatal("the watch never showed shards a and b")
		}
	}
}
