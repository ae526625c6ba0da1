package sidecar

import (
	"context"
	"sync"
	"time"
)

// pools holds one pool per (database, user), created on first use.
type pools struct {
	cfg     PoolConfig
	connStr func(database, user string) string

	mu sync.Mutex
	m  map[[2]string]*pool
}

func (ps *pools) pool(database, user string) *pool {
	key := [2]string{database, user}
	ps.mu.Lock()
	defer ps.mu.Unlock()
	if p := ps.m[key]; p != nil {
		return p
	}
	if ps.m == nil {
		ps.m = map[[2]string]*pool{}
	}
	p := newPool(database, user, ps.connStr(database, user), ps.cfg)
	ps.m[key] = p
	return p
}

func (ps *pools) all() []*pool {
	ps.mu.Lock()
	defer ps.mu.Unlock()
	out := make([]*pool, 0, len(ps.m))
	for _, p := range ps.m {
		out = append(out, p)
	}
	return out
}

// maintain runs each pool's upkeep every interval until ctx ends.
func (ps *pools) maintain(ctx context.Context, interval time.Duration) {
	every(ctx, interval, func() {
		for _, p := range ps.all() {
			p.maintain(ctx)
		}
	})
}

// every calls fn every interval until ctx ends.
func every(ctx context.Context, interval time.Duration, fn func()) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		fn()
	}
}

// closeIdle closes every idle connection (before Postgres restarts).
func (ps *pools) closeIdle() {
	for _, p := range ps.all() {
		p.closeIdle()
	}
}

func (ps *pools) close() {
	for _, p := range ps.all() {
		p.close()
	}
}
