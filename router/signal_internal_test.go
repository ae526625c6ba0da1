package router

import (
	"testing"
	"time"

	"github.com/tesseradb/tessera/topo/store"
)

// TestBufferSignalIgnoresWorkerClockSkew: a signal set by a worker whose
// clock is an hour behind or ahead of the router's holds statements for
// its duration, measured by the router from when it saw the signal. By
// the worker's Until, the router buffered not at all (worker behind) or
// for an hour (worker ahead).
func TestBufferSignalIgnoresWorkerClockSkew(t *testing.T) {
	sh := newShards("", nil, false)
	b := newBuffers(BufferConfig{}.withDefaults(), sh)
	routerNow := time.Now()
	b.now = func() time.Time { return routerNow }
	set := func(st store.ShardState) {
		sh.mu.Lock()
		sh.states[st.Shard] = st
		sh.mu.Unlock()
		b.signals.note(sh.allStates())
	}
	for _, skew := range []time.Duration{-time.Hour, time.Hour} {
		worker := routerNow.Add(skew)
		set(store.ShardState{Shard: "s1", Buffer: &store.BufferSignal{Reason: "switchover",
			Until: worker.Add(10 * time.Second), For: 10 * time.Second, Set: worker}})
		if wait, _ := b.mustWait("s1"); !wait {
			t.Errorf("worker clock %s off: the router did not hold statements", skew)
		}
		routerNow = routerNow.Add(9 * time.Second)
		if wait, _ := b.mustWait("s1"); !wait {
			t.Errorf("worker clock %s off: the router let statements go after 9 s of a 10 s signal", skew)
		}
		routerNow = routerNow.Add(2 * time.Second)
		if wait, _ := b.mustWait("s1"); wait {
			t.Errorf("worker clock %s off: the router still held statements 11 s into a 10 s signal", skew)
		}
		set(store.ShardState{Shard: "s1"})
	}
	// The same signal set again (a retried SetBuffer) holds anew.
	sig := &store.BufferSignal{Reason: "switchover", Until: routerNow.Add(10 * time.Second), For: 10 * time.Second, Set: routerNow}
	set(store.ShardState{Shard: "s1", Buffer: sig})
	routerNow = routerNow.Add(8 * time.Second)
	again := *sig
	again.Set, again.Until = sig.Set.Add(8*time.Second), sig.Until.Add(8*time.Second)
	set(store.ShardState{Shard: "s1", Buffer: &again})
	routerNow = routerNow.Add(8 * time.Second)
	if wait, _ := b.mustWait("s1"); !wait {
		t.Error("a signal set again did not hold statements anew")
	}
}
