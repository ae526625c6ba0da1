package router

import (
	"context"
	"sync"
	"time"

	"github.com/tesseradb/tessera/topo/store"
)

// A buffer signal is set by a worker and obeyed by every router: their
// clocks need not agree. A signal's Until, by the worker's clock, would
// make a router whose clock runs ahead ignore it and one that runs
// behind hold statements too long. So a router measures the signal's
// For from when it first saw the signal, by its own monotonic clock
// (signalClock); Until serves only signals from workers that wrote no
// For.

// signalClock remembers when this router first saw each shard's buffer
// signal.
type signalClock struct {
	now func() time.Time

	mu   sync.Mutex
	seen map[string]seenSignal // by shard
}

type seenSignal struct {
	signal store.BufferSignal
	at     time.Time
}

func newSignalClock(now func() time.Time) *signalClock {
	return &signalClock{now: now, seen: map[string]seenSignal{}}
}

// note records, at the time of the call, the signals of states not seen
// before (a signal set again is new), and forgets shards without one.
func (c *signalClock) note(states map[string]store.ShardState) {
	now := c.now()
	c.mu.Lock()
	defer c.mu.Unlock()
	for shard := range c.seen {
		if st, ok := states[shard]; !ok || st.Buffer == nil {
			delete(c.seen, shard)
		}
	}
	for shard, st := range states {
		if st.Buffer == nil {
			continue
		}
		if s, ok := c.seen[shard]; !ok || !sameSignal(s.signal, *st.Buffer) {
			c.seen[shard] = seenSignal{signal: *st.Buffer, at: now}
		}
	}
}

func sameSignal(a, b store.BufferSignal) bool {
	return a.Reason == b.Reason && a.For == b.For && a.Set.Equal(b.Set) && a.Until.Equal(b.Until)
}

// buffering reports whether st's signal asks this router to hold the
// shard's statements at now.
func (c *signalClock) buffering(st store.ShardState, now time.Time) bool {
	if st.Buffer == nil {
		return false
	}
	if st.Buffer.For <= 0 {
		return st.Buffering(now) // a worker that wrote no duration
	}
	c.mu.Lock()
	s, ok := c.seen[st.Shard]
	if !ok || !sameSignal(s.signal, *st.Buffer) {
		// Not noted yet: it arrived just now.
		s = seenSignal{signal: *st.Buffer, at: now}
		c.seen[st.Shard] = s
	}
	c.mu.Unlock()
	return now.Sub(s.at) < st.Buffer.For
}

// followSignals notes the shard states' signals as they change, until
// ctx ends.
func (c *signalClock) followSignals(ctx context.Context, sh *shards) {
	for {
		changed := sh.changes()
		c.note(sh.allStates())
		select {
		case <-changed:
		case <-ctx.Done():
			return
		}
	}
}

// allStates copies the shard states.
func (s *shards) allStates() map[string]store.ShardState {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make(map[string]store.ShardState, len(s.states))
	for k, v := range s.states {
		out[k] = v
	}
	return out
}
