package sidecar

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// Pipelined connections. An autocommit batch (one statement in its own
// implicit transaction that leaves no session state: the router vouches
// for it with Batch.autocommit) need not have a connection to itself. Up
// to PoolConfig.PipelineConns connections of a pool are shared: a session
// writes its batch on one at once, behind the batches other sessions
// wrote there, and reads its own answer when the answers before it have
// been read. Postgres answers a connection's batches in order, and each
// batch's Sync (or Query) ends its implicit transaction, so an error in
// one skips nothing of the next.
//
// Postgres then finds several statements waiting each time it reads and
// runs them without sleeping in between. On a machine with few cores the
// wake-up per statement, on both sides of each socket, is most of what a
// point lookup costs; pipelined, Postgres spends about a third less CPU
// on one.
//
// The price is that a statement waits for those written before it on its
// connection, as it would wait in a pool with no connection free. That
// wait is bounded: a connection whose current statement has run longer
// than PoolConfig.PipelineSlowStatement takes no more batches (they get a connection of
// their own), nor does one with maxPipelineDepth in flight.
//
// Cancel: a CancelRequest reaches whatever statement the backend runs
// when it arrives. One for a batch still queued is held until the batch
// heads the queue. One that arrives as its statement ends may land on
// the next session's; that statement rolls back (it is autocommit) and,
// if none of its answer has gone out, runs again on a connection of its
// own, unseen by its client.
//
// Goroutines: the pool's mutex guards which connections are shared and
// how many batches each has in flight; the connection's pipe mutex
// orders writes, the queue of readers and cancels. Only the session at
// the head of the queue reads; it hands the reader's role to the next by
// its turn channel once its answer ends.

// maxPipelineDepth bounds the batches in flight on one shared connection.
const maxPipelineDepth = 16

// pipe orders the batches written on a shared connection.
type pipe struct {
	mu sync.Mutex
	// The batches written whose answers are unread, oldest first: a ring
	// of at most maxPipelineDepth, the most a connection has in flight.
	queue       [maxPipelineDepth]*turn
	head, count int
	// Writes combine: a batch that arrives while another session writes
	// waits in out, and that session writes it next, in one system call
	// with any others that came meanwhile.
	writing    bool
	out, spare []byte
	// cancels counts the CancelRequests sent for this connection's
	// backend: a batch that fails with 57014 while it has moved may
	// have been canceled for another session.
	cancels uint64
	// broken: the connection failed; batches not yet written go elsewhere
	// or fail, the ones queued read the failure.
	broken bool
	// headSince is when the batch at the head of the queue started to
	// run, as far as the sidecar can tell (monotonic nanoseconds).
	headSince atomic.Int64
}

// turn is a session's place in a pipe's queue; a session has one and
// reuses it. Its fields other than ready are guarded by the pipe's mutex.
type turn struct {
	ready chan struct{}
	// asked: the session asked to cancel this batch; wanted: it asked
	// while the batch was queued, so the cancel goes when it runs.
	asked, wanted bool
	cancels       uint64 // pipe.cancels when the batch was written
}

func newTurn() *turn { return &turn{ready: make(chan struct{}, 1)} }

// monotonic nanoseconds since the process started.
var processStart = time.Now()

func nanotime() int64 { return int64(time.Since(processStart)) }

// share returns a connection to pipeline an autocommit batch on, or nil
// when the batch should take one of its own: pipelining is off, or a
// shared connection can be had only by probing or dialling, or every
// shared one is full or running a slow statement.
func (p *pool) share() *backend {
	if p.cfg.PipelineConns <= 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	if len(p.shared) < min(p.cfg.PipelineConns, p.cfg.Capacity) {
		// An idle connection used moments ago becomes shared; any other
		// needs the checks of get (a probe, a dial), so the batch goes
		// the ordinary way and its connection is shared next time.
		n := len(p.idle)
		if n == 0 || !p.idle[n-1].recentlyIdle() {
			return nil
		}
		b := p.idle[n-1]
		p.idle = p.idle[:n-1]
		b.inflight = 1
		b.pipe.headSince.Store(nanotime())
		p.shared = append(p.shared, b)
		return b
	}
	var best *backend
	now := nanotime()
	for _, b := range p.shared {
		if b.inflight >= maxPipelineDepth || now-b.pipe.headSince.Load() > int64(p.cfg.PipelineSlowStatement) {
			continue
		}
		if best == nil || b.inflight < best.inflight {
			best = b
		}
	}
	if best != nil {
		best.inflight++
	}
	return best
}

// unshare ends one batch's use of a shared connection; the last one out
// returns it to the pool.
func (p *pool) unshare(b *backend) {
	p.mu.Lock()
	b.inflight--
	last := b.inflight == 0
	if last {
		for i, s := range p.shared {
			if s == b {
				p.shared = append(p.shared[:i], p.shared[i+1:]...)
				break
			}
		}
	}
	p.mu.Unlock()
	if last {
		p.put(b)
	}
}

// pipelined runs an autocommit batch on a shared connection, if one
// suits it; ok is false when the batch must take a connection of its
// own (and nothing of it has gone to the router).
func (sess *session) pipelined(req *pb.Batch) (ok bool, err error) {
	b := sess.pool.share()
	if b == nil {
		return false, nil
	}
	pp := &b.pipe
	pp.mu.Lock()
	// The session's settings must be those the connection carries: only
	// a connection of its own may be changed.
	if pp.broken || !sameSettingsAs(b, req.Settings) {
		pp.mu.Unlock()
		sess.pool.unshare(b)
		return false, nil
	}
	frontend := req.Frontend
	var injected []string // prepared in front of this batch, in order
	for _, ps := range req.Prepared {
		if _, have := b.prepared[ps.Name]; !have {
			injected = append(injected, ps.Name)
		}
	}
	if len(injected) > 0 {
		// Recorded as prepared at once, so that batches written after
		// this one do not prepare it again. Should the Parse fail, the
		// batches behind it that use it read "prepared statement does not
		// exist", and readShared forgets it for the ones after those.
		var prefix []byte
		for _, ps := range req.Prepared {
			if _, have := b.prepared[ps.Name]; !have {
				prefix = appendParse(prefix, ps.Name, ps.Query, ps.ParamOids)
				b.prepared[ps.Name] = struct{}{}
			}
		}
		frontend = append(prefix, frontend...)
	}
	t := sess.turn
	t.asked, t.wanted, t.cancels = false, false, pp.cancels
	first := pp.count == 0
	if first {
		pp.headSince.Store(nanotime())
	}
	pp.queue[(pp.head+pp.count)%maxPipelineDepth] = t
	pp.count++
	if pp.writing {
		pp.out = append(pp.out, frontend...)
		pp.mu.Unlock()
	} else {
		pp.writing = true
		pp.mu.Unlock()
		pp.write(b, frontend)
	}
	sess.srv.cancels.start(sess.token, b, t)
	if !first {
		<-t.ready
	}
	pp.mu.Lock()
	if t.wanted {
		// Asked while queued: the batch runs now (the one before it has
		// answered whole), so the cancel reaches it or one after it.
		t.wanted, t.asked = false, true
		pp.cancels++
		go sess.srv.signalCancel(context.Background(), b)
	}
	pp.mu.Unlock()

	retry, err := sess.readShared(b, injected)
	sess.srv.cancels.stop(sess.token)

	pp.mu.Lock()
	pp.queue[pp.head] = nil
	pp.head = (pp.head + 1) % maxPipelineDepth
	pp.count--
	if pp.count > 0 {
		pp.headSince.Store(nanotime())
		pp.queue[pp.head].ready <- struct{}{}
	}
	pp.mu.Unlock()
	sess.pool.unshare(b)
	return !retry, err
}

// cancel is a session's CancelRequest for its batch queued as t: it
// reports whether to signal the backend now (t runs) or records it for
// when t runs.
func (pp *pipe) cancel(t *turn) bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	if pp.count == 0 || t.asked || t.wanted {
		return false
	}
	if pp.queue[pp.head] != t {
		for i := 1; i < pp.count; i++ {
			if pp.queue[(pp.head+i)%maxPipelineDepth] == t {
				t.wanted = true
			}
		}
		return false
	}
	t.asked = true
	pp.cancels++
	return true
}

// write sends a batch, then whatever other sessions queued in out while
// it was being sent, until out stays empty. A failure breaks the pipe:
// every batch queued reads the failure, none of them counts as run.
func (pp *pipe) write(b *backend, frontend []byte) {
	var sent []byte // pp's buffer just written, to give back
	for {
		_, err := b.conn.Write(frontend)
		pp.mu.Lock()
		if sent != nil {
			pp.spare, sent = sent[:0], nil
		}
		if err != nil && !pp.broken {
			pp.broken, b.broken = true, true
			b.conn.Close()
		}
		if len(pp.out) == 0 || pp.broken {
			pp.out = pp.out[:0]
			pp.writing = false
			pp.mu.Unlock()
			return
		}
		// out's bytes go next; sessions arriving meanwhile append to the
		// spare buffer.
		frontend, sent = pp.out, pp.out
		pp.out, pp.spare = pp.spare, nil
		pp.mu.Unlock()
	}
}

// readShared reads the session's answer from a shared connection, whose
// queue it heads, and passes it on. Whatever happens to the router, the
// answer is read to its end: the next session's follows it. retry: the
// statement was canceled for another session before any of its answer
// went out, so it should run again on a connection of its own.
func (sess *session) readShared(b *backend, injected []string) (retry bool, err error) {
	pp := &b.pipe
	chunk := sess.buf[:0]
	defer func() { sess.buf = chunk[:0] }()
	pp.mu.Lock()
	broken := pp.broken
	pp.mu.Unlock()
	if broken {
		// The batch may have run inside a transaction the connection's
		// end rolled back: whatever answer is buffered does not count.
		chunk = appendErrorResponse(chunk, "ERROR", "08006", "lost the connection to postgres")
		return false, sess.sendShared(pgwire.AppendReadyForQuery(chunk, 'I'), true)
	}
	stripped, emitted, canceled := 0, false, false
	var sendErr error
	for {
		start := len(chunk)
		var typ byte
		var rerr error
		chunk, typ, rerr = readMessage(b.r, chunk)
		if rerr != nil {
			sess.breakShared(b)
			chunk = appendErrorResponse(chunk[:start], "ERROR", "08006", "lost the connection to postgres: "+rerr.Error())
			if sendErr == nil {
				sendErr = sess.sendShared(pgwire.AppendReadyForQuery(chunk, 'I'), true)
			}
			return false, sendErr
		}
		switch typ {
		case msgErrorResponse:
			demoteFatal(chunk[start:])
			canceled = canceled || pgerr.Code(pgwire.ParseError(chunk[start:])) == "57014"
		case msgParseComplete:
			if stripped < len(injected) {
				stripped++
				chunk = chunk[:start]
			}
		case msgCopyInResponse, msgCopyBoth:
			// Not an autocommit statement after all: the connection is
			// in a state no other session may share.
			return false, sess.abandonShared(b, chunk[:start], "a COPY")
		case msgReadyForQuery:
			if tx := chunk[len(chunk)-1]; tx != 'I' {
				return false, sess.abandonShared(b, chunk[:start], "an open transaction")
			}
			if stripped < len(injected) {
				// A Parse failed: it and those after it prepared nothing.
				pp.mu.Lock()
				for _, name := range injected[stripped:] {
					delete(b.prepared, name)
				}
				pp.mu.Unlock()
			}
			if canceled && !emitted && pp.canceledForAnother(sess.turn) {
				return true, nil
			}
			if sendErr == nil {
				sendErr = sess.sendShared(chunk, true)
			}
			return false, sendErr
		}
		if len(chunk) >= chunkSize {
			if sendErr == nil {
				sendErr = sess.sendShared(chunk, false)
			}
			emitted = true
			chunk = chunk[:0]
		}
	}
}

// canceledForAnother reports whether a cancel went to the backend while
// t's batch was in flight without t's session asking for one.
func (pp *pipe) canceledForAnother(t *turn) bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	return !t.asked && pp.cancels != t.cancels
}

// sendShared passes an answer chunk on to the router.
func (sess *session) sendShared(chunk []byte, done bool) error {
	r := &sess.resp
	r.Backend, r.Done, r.TxStatus, r.CopyIn = chunk, done, pb.TxStatus_IDLE, false
	if !done {
		r.TxStatus = pb.TxStatus_TX_STATUS_UNSPECIFIED
	}
	return sess.stream.Send(r)
}

// breakShared marks a shared connection failed and closes it.
func (sess *session) breakShared(b *backend) {
	b.pipe.mu.Lock()
	b.pipe.broken = true
	b.pipe.mu.Unlock()
	b.close()
}

// abandonShared closes a shared connection that a batch left in a state
// no other session may share; the batch's answer ends with an error (the
// closed connection rolled its transaction back) and so do the answers
// queued behind it.
func (sess *session) abandonShared(b *backend, chunk []byte, state string) error {
	sess.breakShared(b)
	chunk = appendErrorResponse(chunk, "ERROR", pgerr.FeatureNotSupported,
		"the statement was sent as autocommit but left "+state+" on a shared connection; it was rolled back")
	return sess.sendShared(pgwire.AppendReadyForQuery(chunk, 'I'), true)
}

// sameSettingsAs reports whether b carries exactly the settings listed.
func sameSettingsAs(b *backend, settings []*pb.Setting) bool {
	if len(settings) == 0 {
		return b.settings == ""
	}
	return sameSettings(b.lastSettings, settings)
}
