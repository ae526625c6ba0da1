package router

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/router/planner"
	"github.com/tesseradb/tessera/topo/store"
)

// Table buffers hide a cutover from clients. A cutover moves some tables
// of a database to other shards while the rest of those shards keep
// serving, so it sets a store.TableBuffer naming them instead of a
// shard's BufferSignal. While one is in force, a new statement of that
// database that names one of its tables waits here before it is placed
// (statements of a transaction already open on a shard go on: a
// transaction cannot move, and the fence's lock_timeout bounds them).
// When the signal is cleared, or its For has run out by this router's
// clock, the held statements are planned again against the topology then
// in force (by then it usually sends them to the tables' new shards) and
// released in order of arrival, releaseBatch at a time. A statement waits
// at most BufferConfig.Window, and at most Size statements wait at once,
// counted with those buffered for a primary change.

// tableBuffers follows the cluster's table buffers.
type tableBuffers struct {
	now func() time.Time
	// active is what is in force now, nil when nothing is: then checking
	// a statement costs one atomic load.
	active atomic.Pointer[tableSignals]

	mu   sync.Mutex
	seen map[string]*tableSignal // by id: when this router saw each signal
	// changed is closed and replaced whenever active changes.
	changed chan struct{}
}

// tableSignals indexes the signals in force by the tables they hold.
type tableSignals struct {
	byTable map[planner.TableName]*tableSignal
	// next is when the first of them runs out.
	next time.Time
}

// tableSignal is one table buffer as this router saw it.
type tableSignal struct {
	buf store.TableBuffer
	// until is when this router stops obeying it: when it first saw it,
	// by its own clock, plus For.
	until time.Time
	// arrivals numbers the statements it held, which leave in that order.
	arrivals atomic.Int64
}

func newTableBuffers(now func() time.Time) *tableBuffers {
	return &tableBuffers{now: now, seen: map[string]*tableSignal{}, changed: make(chan struct{})}
}

// follow applies the stored table buffers as they change, and ends each
// when its For runs out, until ctx ends.
func (tb *tableBuffers) follow(ctx context.Context, st *store.Store) error {
	updates, err := st.WatchTableBuffers(ctx)
	if err != nil {
		return err
	}
	go func() {
		timer := time.NewTimer(time.Hour)
		defer timer.Stop()
		for {
			timer.Stop()
			if set := tb.active.Load(); set != nil {
				timer.Reset(set.next.Sub(tb.now()))
			}
			select {
			case list, ok := <-updates:
				if !ok {
					return
				}
				tb.apply(list)
			case <-timer.C:
				tb.refresh()
			}
		}
	}()
	return nil
}

// apply takes the stored list: signals not seen before (or set again,
// with another Set or For) start their For now.
func (tb *tableBuffers) apply(list []store.TableBuffer) {
	now := tb.now()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	next := make(map[string]*tableSignal, len(list))
	for _, b := range list {
		if s := tb.seen[b.ID]; s != nil && sameTableBuffer(s.buf, b) {
			next[b.ID] = s
			continue
		}
		next[b.ID] = &tableSignal{buf: b, until: now.Add(b.For)}
	}
	tb.seen = next
	tb.publish(now)
}

// refresh drops the signals whose For has run out.
func (tb *tableBuffers) refresh() {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	tb.publish(tb.now())
}

func sameTableBuffer(a, b store.TableBuffer) bool {
	if a.Database != b.Database || a.For != b.For || !a.Set.Equal(b.Set) || len(a.Tables) != len(b.Tables) {
		return false
	}
	for i := range a.Tables {
		if a.Tables[i] != b.Tables[i] {
			return false
		}
	}
	return true
}

// publish makes the signals of tb.seen still in force at now the active
// set and wakes every held statement. tb.mu is held.
func (tb *tableBuffers) publish(now time.Time) {
	var set *tableSignals
	for _, s := range tb.seen {
		if !now.Before(s.until) {
			continue
		}
		if set == nil {
			set = &tableSignals{byTable: map[planner.TableName]*tableSignal{}, next: s.until}
		}
		set.next = minTime(set.next, s.until)
		for _, t := range s.buf.Tables {
			schema, table, _ := strings.Cut(t, ".")
			name := planner.TableName{Database: s.buf.Database, Schema: schema, Table: table}
			// Of two signals on one table, the one that lasts longer
			// decides.
			if cur := set.byTable[name]; cur == nil || cur.until.Before(s.until) {
				set.byTable[name] = s
			}
		}
	}
	tb.active.Store(set)
	close(tb.changed)
	tb.changed = make(chan struct{})
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

// changes returns a channel closed at the next change of the signals in
// force.
func (tb *tableBuffers) changes() <-chan struct{} {
	tb.mu.Lock()
	defer tb.mu.Unlock()
	return tb.changed
}

// covering returns the signal in force that holds one of the tables the
// statements name, or nil. It is on every statement's path: with no
// signal in force it is one atomic load; with some, a map lookup per
// table named (the planner resolved the names already). A signal whose
// For ran out leaves the active set when follow's timer fires.
func (tb *tableBuffers) covering(stmts []*plannedStmt) *tableSignal {
	set := tb.active.Load()
	if set == nil {
		return nil
	}
	for _, st := range stmts {
		if st == nil {
			continue
		}
		for _, t := range st.Tables {
			if s := set.byTable[t]; s != nil {
				return s
			}
		}
	}
	return nil
}

// tableHold is one statement's passage through the table buffers, and
// through waits after a fence refused it: one deadline and one place
// among the buffered statements for all of them.
type tableHold struct {
	deadline time.Time
	counted  bool // it holds a place in buffers.waiting
	signal   *tableSignal
	arrival  int64 // its place in signal's order
}

// startWait starts or continues a wait: it takes a place among the
// buffered statements, and sets the deadline the first time the
// statement waits.
func (b *buffers) startWait(h *tableHold) error {
	if h.counted {
		return nil
	}
	if b.waiting.Add(1) > int64(b.cfg.Size) {
		b.waiting.Add(-1)
		return errTableBufferFull()
	}
	h.counted = true
	if h.deadline.IsZero() {
		h.deadline = b.now().Add(b.cfg.Window)
	}
	return nil
}

// endWait gives back the statement's place among the buffered statements.
func (b *buffers) endWait(h *tableHold) {
	if h.counted {
		b.waiting.Add(-1)
		h.counted = false
	}
}

// tablesHeld reports whether any table buffer is in force: the cheap
// test before a statement is checked against them.
func (b *buffers) tablesHeld() bool {
	return b != nil && b.tables.active.Load() != nil
}

// holdForTables waits while a table buffer holds one of the tables the
// statements name, and reports whether it waited: then the caller plans
// the statements again, against the topology now in force. Statements
// leave in order of arrival, releaseBatch at a time.
func (b *buffers) holdForTables(ctx context.Context, stmts []*plannedStmt, h *tableHold) (waited bool, err error) {
	if !b.tablesHeld() {
		return false, nil
	}
	defer b.endWait(h)
	start := time.Now()
	defer func() {
		if waited {
			b.metrics.observe("table", start, err)
		}
	}()
	for {
		changed := b.tables.changes()
		s := b.tables.covering(stmts)
		if s == nil {
			break
		}
		if err := b.startWait(h); err != nil {
			return waited, err
		}
		if h.signal != s {
			h.signal, h.arrival = s, s.arrivals.Add(1)-1
		}
		waited = true
		if err := b.sleepUntil(ctx, h, changed, nil, func() error { return errTableBufferWindow(s.buf, b.cfg.Window) }); err != nil {
			return waited, err
		}
	}
	if waited && h.signal != nil {
		if d := time.Duration(h.arrival/releaseBatch) * releaseInterval; d > 0 {
			if err := sleepCtx(ctx, d); err != nil {
				return waited, err
			}
		}
	}
	return waited, nil
}

// sleepUntil waits for changed or moved to close, or the hold's
// deadline, when it returns expired's error.
func (b *buffers) sleepUntil(ctx context.Context, h *tableHold, changed, moved <-chan struct{}, expired func() error) error {
	left := h.deadline.Sub(b.now())
	if left <= 0 {
		return expired()
	}
	timer := time.NewTimer(left)
	defer timer.Stop()
	select {
	case <-changed:
	case <-moved:
	case <-timer.C:
		return expired()
	case <-ctx.Done():
		return ctx.Err()
	}
	return nil
}

// errCutoverFenced is how one statement's run reports that a cutover's
// fence refused it (pgerr.CutoverFencePrefix) where it may be planned
// again: its answer was dropped, nothing reached the client.
var errCutoverFenced = pgerr.New(pgerr.ReadOnlySQLTransaction, "%sthe statement is planned again", pgerr.CutoverFencePrefix)

// waitAfterFence holds a statement a cutover's fence refused, planned at
// revision, until the topology moves past that revision or a table
// buffer holds one of its tables (holdForTables then waits for it to
// clear), at most until the hold's deadline.
func (b *buffers) waitAfterFence(ctx context.Context, topo *store.Watcher, revision int64, stmts []*plannedStmt, h *tableHold) error {
	if err := b.startWait(h); err != nil {
		return err
	}
	defer b.endWait(h)
	for {
		changed := b.tables.changes()
		snap := topo.Current()
		if snap.Revision != revision || b.tables.covering(stmts) != nil {
			return nil
		}
		if err := b.sleepUntil(ctx, h, changed, snap.Superseded(), func() error { return errFencedTooLong(b.cfg.Window) }); err != nil {
			return err
		}
	}
}

func errTableBufferWindow(buf store.TableBuffer, window time.Duration) error {
	return pgerr.New("57P03", "tables of database %s are moving to other shards (%s) and the move did not end within %s", buf.Database, buf.Reason, window)
}

func errTableBufferFull() error {
	return pgerr.New("57P03", "tables the statement names are moving to other shards and the router's buffer is full")
}

func errFencedTooLong(window time.Duration) error {
	return pgerr.New("57P03", "a table the statement writes is moving to other shards and no topology that moved it arrived within %s", window)
}
