package planner

import (
	"hash/maphash"
	"sync"
	"sync/atomic"
)

// The plan cache is a bounded map split into shards, each behind its own
// read-write mutex, so that sessions on many cores rarely meet on one lock.
// Eviction is random (Go's map iteration order) with a second chance for
// entries used since the last sweep: close to LRU without a list to update
// on every hit.

const cacheShards = 16

// secondChances bounds how many recently used entries an eviction skips.
const secondChances = 8

type cache struct {
	seed   maphash.Seed
	per    int // entries per shard
	shards [cacheShards]cacheShard
	// rev is the newest topology revision seen: plans of older revisions
	// are dropped when a newer one appears.
	rev atomic.Int64
}

type cacheShard struct {
	mu      sync.RWMutex
	entries map[string]*entry
	hits    atomic.Uint64
	misses  atomic.Uint64
	_       [64]byte // keeps neighbouring shards' hot fields off one cache line
}

// entry is the plan of one input, shared by every input of its shape (or,
// under an exact-text key, only by the same text).
type entry struct {
	text  string // the input planned
	stmts []*Statement
	used  atomic.Bool
}

func newCache(capacity int) *cache {
	c := &cache{seed: maphash.MakeSeed(), per: (capacity + cacheShards - 1) / cacheShards}
	for i := range c.shards {
		c.shards[i].entries = map[string]*entry{}
	}
	return c
}

func (c *cache) shard(key []byte) *cacheShard {
	return &c.shards[maphash.Bytes(c.seed, key)%cacheShards]
}

// get looks key up. It returns the key's shard too, where the caller
// counts the outcome of the whole lookup (a shape miss may still be an
// exact-text hit).
func (c *cache) get(key []byte) (*entry, *cacheShard) {
	sh := c.shard(key)
	sh.mu.RLock()
	e := sh.entries[string(key)]
	sh.mu.RUnlock()
	if e != nil && !e.used.Load() {
		e.used.Store(true)
	}
	return e, sh
}

func (c *cache) put(key []byte, e *entry) {
	sh := c.shard(key)
	sh.mu.Lock()
	defer sh.mu.Unlock()
	if _, ok := sh.entries[string(key)]; !ok && len(sh.entries) >= c.per {
		skipped := 0
		for k, old := range sh.entries {
			if old.used.Swap(false) && skipped < secondChances {
				skipped++
				continue
			}
			delete(sh.entries, k)
			break
		}
	}
	sh.entries[string(key)] = e
}

// observe drops every plan when a newer topology revision appears.
func (c *cache) observe(rev int64) {
	for {
		old := c.rev.Load()
		if rev <= old {
			return
		}
		if c.rev.CompareAndSwap(old, rev) {
			c.clear()
			return
		}
	}
}

func (c *cache) clear() {
	for i := range c.shards {
		sh := &c.shards[i]
		sh.mu.Lock()
		sh.entries = map[string]*entry{}
		sh.mu.Unlock()
	}
}

func (c *cache) stats() Stats {
	var s Stats
	for i := range c.shards {
		sh := &c.shards[i]
		s.Hits += sh.hits.Load()
		s.Misses += sh.misses.Load()
		sh.mu.RLock()
		s.Entries += len(sh.entries)
		sh.mu.RUnlock()
	}
	return s
}
