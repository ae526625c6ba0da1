package sidecar

import (
	"context"
	"math/rand/v2"
	"runtime"
	"sync"
	"time"

	"github.com/tesseradb/tessera/pgerr"
)

// PoolConfig sizes each (database, user) pool.
type PoolConfig struct {
	// Capacity is the most connections the pool opens.
	Capacity int
	// MinIdle connections are kept open even when unused.
	MinIdle int
	// MaxLifetime closes a connection after this long, jittered by up to
	// a fifth so that connections opened together do not all close
	// together.
	MaxLifetime time.Duration
	// MaxWait bounds how long a session waits for a connection when all
	// are busy; then it gets SQLSTATE 53300.
	MaxWait time.Duration
	// IdleTimeout closes connections idle in the pool for this long
	// (beyond MinIdle).
	IdleTimeout time.Duration
	// IdleInTransactionTimeout ends a session that keeps a transaction
	// open without sending anything for this long, as Postgres's
	// idle_in_transaction_session_timeout does; 0 disables it.
	IdleInTransactionTimeout time.Duration
	// PipelineConns is how many connections autocommit statements share,
	// pipelined (pipeline.go); 0 gives every statement a connection of
	// its own. The default, one per CPU, keeps every core of a machine
	// that runs the sidecar beside its Postgres busy: each connection's
	// statements run one after another in one Postgres process. It counts
	// within Capacity.
	PipelineConns int
	// PipelineSlowStatement: a shared connection whose statement has run
	// this long takes no more batches, which bounds how long one waits
	// behind another session's statement.
	PipelineSlowStatement time.Duration
	// PipelineStuckStatement: a shared connection whose statement has
	// run this long while batches wait behind it is broken off: its
	// statement is canceled and every batch on it runs again on a
	// connection of its own. A plain read can block (on a lock held by a
	// transaction, whose client may be waiting for one of the batches
	// queued behind it, a wait no deadlock detector sees); this bounds
	// what the batches behind it wait.
	PipelineStuckStatement time.Duration
	// MaxConnStatements bounds the content-named prepared statements one
	// connection holds (each costs Postgres memory for its plan): a
	// connection that passes it retires, closing when it next comes
	// back, and its successor prepares what it needs afresh. 0 means
	// defaultMaxConnStatements.
	MaxConnStatements int
}

// defaultMaxConnStatements: an application's distinct statements rarely
// number more; a few megabytes of plans per connection.
const defaultMaxConnStatements = 500

func (c *PoolConfig) maxConnStatements() int {
	if c.MaxConnStatements > 0 {
		return c.MaxConnStatements
	}
	return defaultMaxConnStatements
}

// recentlyUsed is how long after its last use a connection is trusted to
// be alive without probing its socket (the probe costs system calls on
// every checkout of a busy pool). A connection that died in that window
// fails its next batch with 08006, as a Postgres client would see.
const recentlyUsed = 250 * time.Millisecond

// DefaultPoolConfig suits a small machine.
var DefaultPoolConfig = PoolConfig{
	Capacity:                 20,
	MinIdle:                  0,
	MaxLifetime:              30 * time.Minute,
	MaxWait:                  5 * time.Second,
	IdleTimeout:              5 * time.Minute,
	IdleInTransactionTimeout: 10 * time.Minute,
	PipelineConns:            runtime.NumCPU(),
	PipelineSlowStatement:    time.Millisecond,
	PipelineStuckStatement:   100 * time.Millisecond,
	MaxConnStatements:        defaultMaxConnStatements,
}

// pool holds the connections of one (database, user). Connections are
// handed out most-recently-used first, so that the idle ones age out.
type pool struct {
	database, user string
	connString     string
	cfg            PoolConfig

	mu      sync.Mutex
	open    int        // connections open: idle plus checked out plus being dialled
	idle    []*backend // stack, most recently returned last
	shared  []*backend // connections autocommit batches are pipelined on
	waiters []chan struct{}
	closed  bool
	// conns is every open connection, idle or in use, so that abandon
	// can close them all; connections join and leave it only when they
	// are dialled and closed, never per checkout.
	conns map[*backend]struct{}
	// epoch counts abandonments; a dial begun before one does not join
	// the pool after it. dials ends with the current epoch, ending the
	// dials under way.
	epoch       uint64
	dials       context.Context
	cancelDials context.CancelFunc
	// counters are the waits and timeouts metrics.go reports.
	counters poolCounters
}

func newPool(database, user, connString string, cfg PoolConfig) *pool {
	dials, cancel := context.WithCancel(context.Background())
	return &pool{database: database, user: user, connString: connString, cfg: cfg,
		conns: map[*backend]struct{}{}, dials: dials, cancelDials: cancel}
}

// dial opens a connection and tracks it. p.open already counts it. A
// dial that an abandonment overtakes fails with 08001: nothing was sent.
func (p *pool) dial(ctx context.Context) (*backend, error) {
	p.mu.Lock()
	epoch, dials := p.epoch, p.dials
	p.mu.Unlock()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	defer context.AfterFunc(dials, cancel)()
	b, err := dialBackend(ctx, p.connString, p.lifetime())
	p.mu.Lock()
	if err == nil && p.epoch == epoch {
		b.owner = p
		p.conns[b] = struct{}{}
		p.mu.Unlock()
		return b, nil
	}
	abandoned := p.epoch != epoch
	p.mu.Unlock()
	if b != nil {
		b.close()
	}
	if abandoned {
		return nil, pgerr.New("08001", "%s", errDeposedText(true))
	}
	return nil, err
}

// forget stops tracking a connection that closed.
func (p *pool) forget(b *backend) {
	p.mu.Lock()
	delete(p.conns, b)
	p.mu.Unlock()
}

// get checks a connection out, dialling one if there is room, or waiting
// up to MaxWait for one to come back.
func (p *pool) get(ctx context.Context) (*backend, error) {
	// The timer starts only when the pool makes us wait: most gets find
	// an idle connection, and a timer per get was the hot path's biggest
	// allocation.
	var deadline *time.Timer
	defer func() {
		if deadline != nil {
			deadline.Stop()
		}
	}()
	p.mu.Lock()
	for {
		if p.closed {
			p.mu.Unlock()
			return nil, pgerr.New("57P01", "the sidecar is shutting down")
		}
		if n := len(p.idle); n > 0 {
			b := p.idle[n-1]
			p.idle = p.idle[:n-1]
			p.mu.Unlock()
			// A connection back from its last use moments ago is taken as
			// alive without a system call; one that sat idle is probed.
			if b.recentlyIdle() || time.Now().Before(b.expires) && b.alive() {
				return b, nil
			}
			b.close()
			p.mu.Lock()
			p.open--
			continue
		}
		if p.open < p.cfg.Capacity {
			p.open++
			p.mu.Unlock()
			b, err := p.dial(ctx)
			if err != nil {
				p.mu.Lock()
				p.open--
				p.wakeOne()
				p.mu.Unlock()
				return nil, err
			}
			return b, nil
		}
		w := make(chan struct{}, 1)
		p.waiters = append(p.waiters, w)
		p.mu.Unlock()
		if deadline == nil {
			deadline = time.NewTimer(p.cfg.MaxWait)
			p.counters.waits.Add(1)
		}
		select {
		case <-w:
			p.mu.Lock()
		case <-deadline.C:
			p.drop(w)
			p.counters.timeouts.Add(1)
			return nil, pgerr.New("53300", "sidecar pool for database %q, user %q is exhausted: all %d connections stayed busy for %s",
				p.database, p.user, p.cfg.Capacity, p.cfg.MaxWait)
		case <-ctx.Done():
			p.drop(w)
			return nil, pgerr.New("57014", "canceled while waiting for a connection: %v", ctx.Err())
		}
	}
}

// drop removes a waiter that gave up; if it was woken meanwhile, the
// wake-up passes to the next waiter so that none is lost.
func (p *pool) drop(w chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for i, x := range p.waiters {
		if x == w {
			p.waiters = append(p.waiters[:i], p.waiters[i+1:]...)
			return
		}
	}
	p.wakeOne()
}

// wakeOne wakes the longest waiter. p.mu must be held.
func (p *pool) wakeOne() {
	if len(p.waiters) > 0 {
		w := p.waiters[0]
		p.waiters = p.waiters[1:]
		w <- struct{}{}
	}
}

// put returns a connection. A broken or expired one is closed instead.
func (p *pool) put(b *backend) {
	keep := !b.broken && b.txStatus == 'I' && time.Now().Before(b.expires) && !b.retired.Load() && !b.abandoned.Load()
	p.mu.Lock()
	keep = keep && !p.closed
	if keep {
		b.idleAt = time.Now()
		p.idle = append(p.idle, b)
	} else {
		p.open--
	}
	p.wakeOne()
	p.mu.Unlock()
	if !keep {
		b.close()
	}
}

// lifetime returns MaxLifetime less up to a fifth, at random.
func (p *pool) lifetime() time.Duration {
	return p.cfg.MaxLifetime - time.Duration(rand.Int64N(int64(p.cfg.MaxLifetime)/5+1))
}

// maintain closes connections idle too long or past their lifetime and
// opens connections up to MinIdle. The server calls it periodically.
func (p *pool) maintain(ctx context.Context) {
	now := time.Now()
	var stale []*backend
	p.mu.Lock()
	keep := p.idle[:0]
	for i, b := range p.idle {
		// The oldest-returned connections are first in the stack.
		surplus := len(p.idle)-i > p.cfg.MinIdle
		if !now.Before(b.expires) || (surplus && now.Sub(b.idleAt) > p.cfg.IdleTimeout) {
			stale = append(stale, b)
			p.open--
			continue
		}
		keep = append(keep, b)
	}
	p.idle = keep
	missing := min(p.cfg.MinIdle-len(p.idle), p.cfg.Capacity-p.open)
	p.open += max(missing, 0)
	p.mu.Unlock()
	for _, b := range stale {
		b.close()
	}
	for i := 0; i < missing; i++ {
		b, err := p.dial(ctx)
		if err != nil {
			p.mu.Lock()
			p.open -= missing - i
			p.mu.Unlock()
			return
		}
		p.put(b)
	}
}

// close closes the idle connections and refuses new checkouts; checked
// out ones close when they come back.
func (p *pool) close() {
	p.mu.Lock()
	p.closed = true
	idle := p.idle
	p.idle = nil
	p.open -= len(idle)
	for _, w := range p.waiters {
		w <- struct{}{}
	}
	p.waiters = nil
	p.mu.Unlock()
	for _, b := range idle {
		b.close()
	}
}

// closeIdle closes the pool's idle connections.
func (p *pool) closeIdle() {
	p.mu.Lock()
	idle := p.idle
	p.idle = nil
	p.open -= len(idle)
	p.wakeOne()
	p.mu.Unlock()
	for _, b := range idle {
		b.close()
	}
}
