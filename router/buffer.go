package router

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tesseradb/tessera/pgerr"
)

// Query buffering hides a primary change from clients. While a shard's
// primary is being replaced, its new statements (not those of a
// transaction already open on it) wait here instead of failing, then
// are planned again against the current topology and health and released
// in order, a few at a time. Two things start buffering a shard:
//
//   - a planned signal: the shard state's Buffer, which a switchover or
//     cutover sets before it fences the old primary and clears after;
//   - a qualifying failure from the primary, one that proves the
//     statement did not run: the sidecar or Postgres refused the
//     connection (08001, 08006 before anything was sent, 57P03), or the
//     primary is read-only (25006, a fenced primary). An episode starts,
//     and ends when the shard's primary (perhaps a new one) reports itself
//     serving and writable, or after MaxFailoverDuration.
//
// A statement waits at most Window; beyond it, or when Size statements
// already wait, the client gets 57P03 with a message saying why. After an
// episode ends, failures within MinTimeBetweenFailovers do not start a
// new one (a flapping primary must not hold clients forever), except for
// statements that already waited in the last one.

// BufferConfig bounds query buffering. Zero values take the defaults,
// which are Vitess's and Multigres's.
type BufferConfig struct {
	// Disabled turns buffering off: failures reach clients at once.
	Disabled bool
	// Window is the longest one statement waits (10 s).
	Window time.Duration
	// Size is how many statements may wait at once, over all shards (1000).
	Size int
	// MaxFailoverDuration ends an episode that lasts longer (20 s).
	MaxFailoverDuration time.Duration
	// MinTimeBetweenFailovers is the quiet time after an episode (1 min).
	MinTimeBetweenFailovers time.Duration
}

func (c BufferConfig) withDefaults() BufferConfig {
	if c.Window == 0 {
		c.Window = 10 * time.Second
	}
	if c.Size == 0 {
		c.Size = 1000
	}
	if c.MaxFailoverDuration == 0 {
		c.MaxFailoverDuration = 20 * time.Second
	}
	if c.MinTimeBetweenFailovers == 0 {
		c.MinTimeBetweenFailovers = time.Minute
	}
	return c
}

func (c BufferConfig) validate() error {
	if c.Window < 0 || c.Size < 0 || c.MaxFailoverDuration < 0 || c.MinTimeBetweenFailovers < 0 {
		return errors.New("buffer limits must not be negative")
	}
	return nil
}

// Released statements go out releaseBatch at a time, releaseInterval
// apart, so a new primary is not hit by every buffered client at once.
const (
	releaseBatch    = 32
	releaseInterval = 5 * time.Millisecond
)

// buffers holds statements of shards whose primary is changing.
type buffers struct {
	cfg     BufferConfig
	shards  *shards
	now     func() time.Time
	signals *signalClock  // when this router saw each planned signal
	tables  *tableBuffers // a cutover's signals (tablebuffer.go)

	metrics *bufferMetrics
	waiting atomic.Int64 // statements waiting now, over all shards and table buffers
	live    atomic.Int64 // episodes not yet ended

	mu       sync.Mutex
	episodes map[string]*episode // by shard: failure-triggered buffering
}

// episode is one failure-triggered buffering of a shard.
type episode struct {
	started  time.Time
	ended    time.Time // zero while it lasts
	released atomic.Int64
}

func newBuffers(cfg BufferConfig, sh *shards) *buffers {
	b := &buffers{cfg: cfg, shards: sh, now: time.Now, episodes: map[string]*episode{}, metrics: newBufferMetrics()}
	b.signals = newSignalClock(func() time.Time { return b.now() })
	b.tables = newTableBuffers(func() time.Time { return b.now() })
	return b
}

// errBufferTimeout and friends are what a client gets when buffering
// cannot hide a primary change.
func errBufferWindow(shard string, window time.Duration) error {
	return pgerr.New("57P03", "shard %s: its primary is changing and no primary took over within %s", shard, window)
}

func errBufferFull(shard string) error {
	return pgerr.New("57P03", "shard %s: its primary is changing and the router's buffer is full", shard)
}

// qualifies reports whether code proves a statement did not run on a
// primary that is going away, so it may wait and run again elsewhere.
func qualifies(code string) bool {
	switch code {
	case "08001", "57P03", "25006":
		return true
	}
	return false
}

// ticket is one statement's passage through the buffer.
type ticket struct {
	deadline time.Time
	waited   bool // it waited in an episode, so it may start another
}

// hold waits while the shard is buffering, at most until the ticket's
// deadline. It returns at once when nothing buffers, which is the hot
// path: two atomic loads unless an episode or a signal exists.
func (b *buffers) hold(ctx context.Context, shard string, t *ticket) (err error) {
	if b == nil || (!t.waited && b.live.Load() == 0 && !b.shards.anyBuffering.Load()) {
		return nil
	}
	start, waitedHere := time.Now(), false
	defer func() {
		if waitedHere {
			b.metrics.observe("primary", start, err)
		}
	}()
	for {
		wait, ep := b.mustWait(shard)
		if wait {
			waitedHere = true
		}
		if !wait {
			if ep != nil && t.waited {
				// Leave in order, a batch at a time.
				k := ep.released.Add(1) - 1
				if d := time.Duration(k/releaseBatch) * releaseInterval; d > 0 {
					if err := sleepCtx(ctx, d); err != nil {
						return err
					}
				}
			}
			return nil
		}
		if t.deadline.IsZero() {
			t.deadline = b.now().Add(b.cfg.Window)
		}
		if !t.waited {
			if b.waiting.Add(1) > int64(b.cfg.Size) {
				b.waiting.Add(-1)
				return errBufferFull(shard)
			}
			defer b.waiting.Add(-1)
			t.waited = true
		}
		left := t.deadline.Sub(b.now())
		if left <= 0 {
			return errBufferWindow(shard, b.cfg.Window)
		}
		// Wake at any change of instances, health or shard states, and
		// at least every 100 ms to see a signal expire.
		timer := time.NewTimer(min(left, 100*time.Millisecond))
		select {
		case <-b.shards.changes():
		case <-timer.C:
		case <-ctx.Done():
			timer.Stop()
			return ctx.Err()
		}
		timer.Stop()
	}
}

// mustWait reports whether statements for shard must wait now, ending
// the shard's episode when its primary is back or it lasted too long.
func (b *buffers) mustWait(shard string) (bool, *episode) {
	now := b.now()
	if st, ok := b.shards.state(shard); ok && b.signals.buffering(st, now) {
		return true, nil
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ep := b.episodes[shard]
	if ep == nil || !ep.ended.IsZero() {
		return false, ep
	}
	if now.Sub(ep.started) >= b.cfg.MaxFailoverDuration || b.primaryBack(shard, ep.started) {
		ep.ended = now
		b.live.Add(-1)
		return false, ep
	}
	return true, ep
}

// primaryBack reports whether the shard's primary, as the router would
// pick it now, said after since (by the router's clock: the time the
// message arrived) that it serves and takes writes.
func (b *buffers) primaryBack(shard string, since time.Time) bool {
	in, err := b.shards.pick(shard, false)
	if err != nil {
		return false
	}
	h := in.health.Load()
	return h != nil && h.Serving && h.Writable && in.healthAt.Load() > since.UnixMilli()
}

// failed reports a qualifying failure of a statement for shard and says
// whether the statement should wait and run again.
func (b *buffers) failed(shard string, t *ticket) bool {
	if b == nil {
		return false
	}
	now := b.now()
	if !t.deadline.IsZero() && !now.Before(t.deadline) {
		return false
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	ep := b.episodes[shard]
	switch {
	case ep != nil && ep.ended.IsZero():
		// Already buffering.
	case ep != nil && now.Sub(ep.ended) < b.cfg.MinTimeBetweenFailovers && !t.waited:
		return false
	default:
		b.episodes[shard] = &episode{started: now}
		b.live.Add(1)
	}
	return true
}

// retryRead runs read, an idempotent read on shard (the router's own
// catalog and role queries, which a client's startup needs), waiting in
// the buffer and running it again after a failure a primary change
// explains. Without buffering it runs read once.
func (b *buffers) retryRead(ctx context.Context, shard string, read func() error) error {
	var t ticket
	for {
		if err := b.hold(ctx, shard, &t); err != nil {
			return err
		}
		err := read()
		if err == nil {
			return nil
		}
		// A read is safe to run again after any connection failure.
		if code := pgerr.Code(err); !(code == "08006" || qualifies(code)) || !b.failed(shard, &t) {
			return err
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
