package sidecar

import (
	"bytes"
	"context"
	"encoding/binary"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// Pipelined connections. An autocommit batch (plain reads in their own
// implicit transaction that leave no session state: the router vouches
// for it with Batch.autocommit) need not have a connection to itself. Up to PoolConfig.PipelineConns connections of a
// pool are shared: a session writes its batch on one at once, behind the
// batches other sessions wrote there, and reads its own answer when the
// answers before it have been read. Postgres answers a connection's
// batches in order, and each batch's Sync (or Query) ends its implicit
// transaction, so an error in one skips nothing of the next.
//
// Postgres then finds several statements waiting each time it reads and
// runs them without sleeping in between. On a machine with few cores the
// wake-up per statement, on both sides of each socket, is most of what a
// point lookup costs; pipelined, Postgres spends about a third less CPU
// on one.
//
// The price is that a statement waits for those written before it on its
// connection, as it would wait in a pool with no connection free. That
// wait is bounded for new batches: a connection whose current statement
// has run longer than PoolConfig.PipelineSlowStatement takes no more
// (they get a connection of their own), nor does one with
// maxPipelineDepth in flight. For the batches already queued it is
// bounded by PoolConfig.PipelineStuckStatement: past it the connection
// is broken off and they run again elsewhere (unstickPipelines), since a
// read blocked on a lock may be waiting, through the lock's holder, for
// one of them. A slow router or client costs the others
// nothing: an answer is read whole into memory, and the reader's role
// passes on before it goes out. An answer larger than maxPipelinedAnswer
// or a batch larger than maxPipelinedBatch does not belong here: the
// first closes the connection and runs again on one of its own, the
// second goes there at once. So bounded, the batches in flight on a
// connection fit in its socket's buffer together, and a write never
// waits for Postgres, which may itself be waiting for its answers to be
// read.
//
// A broken connection (lost, or closed because a batch left it in a
// state no other session may share) ends the batches queued on it
// without an answer: they run again on connections of their own.
// Postgres may have run some of them already, so the router marks only
// statements without side effects (planner.Statement.Pipelinable).
//
// Cancel: a CancelRequest reaches whatever statement the backend runs
// when it arrives. One for a batch still queued is held until the batch
// heads the queue. One that lands on the next session's statement,
// because the one it was for had just ended, makes that statement fail
// with 57014; the sidecar runs it again on a connection of its own,
// unseen by its client.
//
// Goroutines: the pool's mutex guards which connections are shared and
// how many batches each has in flight; the connection's pipe mutex
// orders writes, the queue of readers and cancels, and guards the turn
// fields of the batches in its queue. Only the session at the head of
// the queue reads; it hands the reader's role to the next by its turn
// channel once its answer is in.

// Bounds of pipelining: the batches in flight on one shared connection,
// the size of one batch, the size of one answer held in memory.
const (
	maxPipelineDepth   = 16
	maxPipelinedBatch  = 4 << 10
	maxPipelinedAnswer = 256 << 10
)

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
	// CancelRequests for this connection's backend: started when
	// decided, finished once Postgres took them (its signal is then
	// pending on the backend). A batch written after every started one
	// had finished cannot be hit by one.
	cancelsStarted, cancelsFinished uint64
	// inCancel counts the started ones not finished: a connection goes
	// back to the pool only once it is zero.
	inCancel sync.WaitGroup
	// broken: the connection failed or was closed; batches not yet
	// written go elsewhere, the ones queued run again elsewhere.
	broken bool
	// headSince is when the batch at the head of the queue started to
	// run, as far as the sidecar can tell (monotonic nanoseconds).
	headSince atomic.Int64
}

// turn is a session's place in a pipe's queue; a session has one and
// reuses it. While it is queued, its fields other than ready are guarded
// by that pipe's mutex.
type turn struct {
	ready chan struct{}
	// asked: the session asked to cancel this batch; wanted: it asked
	// while the batch was queued, so the cancel goes when it runs.
	asked, wanted bool
	// finishedAtWrite is pipe.cancelsFinished when the batch was written.
	finishedAtWrite uint64
}

func newTurn() *turn { return &turn{ready: make(chan struct{}, 1)} }

// monotonic nanoseconds since the process started.
var processStart = time.Now()

func nanotime() int64 { return int64(time.Since(processStart)) }

// pipelinable reports whether frontend is a batch that may share a
// connection, answered by one ReadyForQuery: a single Query, or
// extended-protocol messages ending in their only Sync, within
// maxPipelinedBatch. The router's word (Batch.autocommit) is taken for
// what the statements do, not for the shape of the batch, on which the
// answers' alignment depends.
func pipelinable(frontend []byte) bool {
	if len(frontend) > maxPipelinedBatch {
		return false
	}
	for len(frontend) >= 5 {
		n := int(binary.BigEndian.Uint32(frontend[1:])) + 1
		if n < 5 || n > len(frontend) {
			return false
		}
		switch frontend[0] {
		case 'Q', 'S':
			return n == len(frontend)
		case 'P', 'B', 'D', 'E', 'C':
		default:
			return false
		}
		frontend = frontend[n:]
	}
	return false
}

// share returns a connection to pipeline an autocommit batch on, or nil
// when the batch should take one of its own: pipelining is off, or a
// shared connection can be had only by probing or dialling, or every
// shared one is full, running a slow statement or past its lifetime.
func (p *pool) share() *backend {
	if p.cfg.PipelineConns <= 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return nil
	}
	wall := time.Now()
	now := int64(wall.Sub(processStart))
	if len(p.shared) < min(p.cfg.PipelineConns, p.cfg.Capacity) {
		// An idle connection used moments ago becomes shared. Any other
		// needs the checks of get (a probe, a dial): the batch goes the
		// ordinary way, and its connection is shared next time. (Joining
		// a shared connection instead did worse: 0.65 of direct Postgres
		// against 0.71 in interleaved runs, a connection of one's own
		// letting Postgres use another core meanwhile.)
		n := len(p.idle)
		if n == 0 || !p.idle[n-1].recentlyIdle() {
			return nil
		}
		b := p.idle[n-1]
		p.idle = p.idle[:n-1]
		b.inflight = 1
		b.pipe.headSince.Store(now)
		p.shared = append(p.shared, b)
		return b
	}
	var best *backend
	for _, b := range p.shared {
		// One past its lifetime drains and goes back to the pool, which
		// closes it.
		if b.inflight >= maxPipelineDepth || now-b.pipe.headSince.Load() > int64(p.cfg.PipelineSlowStatement) || !wall.Before(b.expires) || b.retired.Load() || b.abandoned.Load() {
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
		// No cancel meant for a batch of the sharing may land on the
		// connection's next user.
		b.pipe.inCancel.Wait()
		p.put(b)
	}
}

// pipelined runs an autocommit batch on a shared connection, if one
// suits it; ok is false when the batch must take a connection of its
// own (and nothing of it has gone to the router).
func (sess *session) pipelined(req *pb.Batch) (ok bool, err error) {
	if !pipelinable(req.Frontend) {
		return false, nil
	}
	b := sess.pool.share()
	if b == nil {
		return false, nil
	}
	pp := &b.pipe
	pp.mu.Lock()
	// The session's settings must be those the connection carries: only
	// a connection of its own may be changed. A batch that finds the
	// fence gate closed here goes the ordinary way, which refuses it.
	if pp.broken || !sameSettingsAs(b, req.Settings) || sess.srv.fence.closed.Load() {
		pp.mu.Unlock()
		sess.pool.unshare(b)
		return false, nil
	}
	// Statements the connection lacks are prepared in front of the batch.
	frontend := req.Frontend
	var injected []string
	var prefix []byte
	for _, ps := range req.Prepared {
		if _, have := b.prepared[ps.Name]; !have {
			injected = append(injected, ps.Name)
			prefix = appendParse(prefix, ps.Name, ps.Query, ps.ParamOids)
		}
	}
	if len(injected) > 0 {
		if len(prefix)+len(frontend) > maxPipelinedBatch {
			pp.mu.Unlock()
			sess.pool.unshare(b)
			return false, nil
		}
		// Recorded as prepared at once, so that batches written after
		// this one do not prepare it again. Should the Parse fail, the
		// batches behind it that use it read "prepared statement does not
		// exist", and readShared forgets it for the ones after those.
		for _, name := range injected {
			b.prepared[name] = struct{}{}
		}
		b.limitStatements(sess.pool.cfg.maxConnStatements())
		frontend = append(prefix, frontend...)
	}
	t := sess.turn
	t.asked, t.wanted, t.finishedAtWrite = false, false, pp.cancelsFinished
	first := pp.count == 0
	if first {
		pp.headSince.Store(nanotime())
	}
	pp.queue[(pp.head+pp.count)%maxPipelineDepth] = t
	pp.count++
	sess.srv.cancels.start(sess.token, b, t)
	if pp.writing {
		pp.out = append(pp.out, frontend...)
		pp.mu.Unlock()
	} else {
		pp.writing = true
		pp.mu.Unlock()
		pp.write(b, frontend)
	}
	if !first {
		<-t.ready
	}
	pp.mu.Lock()
	if t.wanted {
		// Asked while queued: the batch runs now (the one before it has
		// answered whole), so the cancel reaches it or one after it.
		t.wanted, t.asked = false, true
		pp.cancelBeginLocked()
		go func() {
			sess.srv.signalCancel(context.Background(), b)
			pp.cancelDone()
		}()
	}
	pp.mu.Unlock()

	answer, retry := sess.readShared(b, injected)

	pp.mu.Lock()
	if retry && t.asked {
		// The session canceled this batch and the connection broke under
		// it: it is answered as canceled rather than run again where the
		// cancel would not follow.
		answer, retry = canceledAnswer(sess.buf[:0]), false
	}
	pp.queue[pp.head] = nil
	pp.head = (pp.head + 1) % maxPipelineDepth
	pp.count--
	if pp.count > 0 {
		pp.headSince.Store(nanotime())
		pp.queue[pp.head].ready <- struct{}{}
	}
	pp.mu.Unlock()
	sess.srv.cancels.stop(sess.token)
	sess.pool.unshare(b)
	if retry {
		return false, nil
	}
	// The answer goes out after the turn has passed: a slow router
	// delays no one else.
	for len(answer) > chunkSize {
		if err := sess.sendShared(answer[:chunkSize], false); err != nil {
			return true, err
		}
		answer = answer[chunkSize:]
	}
	return true, sess.sendShared(answer, true)
}

// canceledAnswer is the answer of a batch canceled before it could run.
func canceledAnswer(dst []byte) []byte {
	dst = appendErrorResponse(dst, "ERROR", pgerr.QueryCanceled, "canceling statement due to user request")
	return pgwire.AppendReadyForQuery(dst, 'I')
}

// stuck returns the shared connections whose statement has run longer
// than PipelineStuckStatement with batches waiting behind it.
func (p *pool) stuck(now int64) []*backend {
	if p.cfg.PipelineConns <= 0 {
		return nil
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*backend
	for _, b := range p.shared {
		if b.inflight > 1 && now-b.pipe.headSince.Load() > int64(p.cfg.PipelineStuckStatement) {
			out = append(out, b)
		}
	}
	return out
}

// unstickPipelines breaks off every stuck shared connection: its
// statement is canceled and the connection closed, and the batches on it
// run again on connections of their own (readShared finds it broken).
// The cancel lets Postgres end a statement waiting on a lock at once;
// it can reach only statements whose answers no one will read.
func (s *Server) unstickPipelines(ctx context.Context) {
	now := nanotime()
	for _, p := range s.pools.all() {
		for _, b := range p.stuck(now) {
			pp := &b.pipe
			pp.mu.Lock()
			if pp.broken || pp.count < 2 || now-pp.headSince.Load() <= int64(p.cfg.PipelineStuckStatement) {
				pp.mu.Unlock()
				continue
			}
			pp.broken, b.broken = true, true
			pp.cancelBeginLocked()
			pp.mu.Unlock()
			s.log.Warn("a pipelined statement blocked the batches behind it; they run again on connections of their own",
				"database", p.database, "user", p.user, "running", time.Duration(now-pp.headSince.Load()), "queued", pp.count-1)
			go func() {
				s.signalCancel(ctx, b)
				pp.cancelDone()
				b.closeConn()
			}()
		}
	}
}

// watchPipelines runs unstickPipelines until ctx ends, often enough
// that no batch waits much longer than PipelineStuckStatement.
func (s *Server) watchPipelines(ctx context.Context) {
	if s.cfg.Pool.PipelineConns <= 0 {
		return
	}
	every(ctx, max(s.cfg.Pool.PipelineStuckStatement/4, time.Millisecond), func() { s.unstickPipelines(ctx) })
}

// cancel is a session's CancelRequest for its batch queued as t: it
// reports whether to signal the backend now (t runs; the caller then
// calls cancelDone) or records it for when t runs.
func (pp *pipe) cancel(t *turn) bool {
	pp.mu.Lock()
	defer pp.mu.Unlock()
	// t's fields are this pipe's to touch only while t is in its queue.
	at := -1
	for i := 0; i < pp.count; i++ {
		if pp.queue[(pp.head+i)%maxPipelineDepth] == t {
			at = i
			break
		}
	}
	if at < 0 || t.asked || t.wanted {
		return false
	}
	if at > 0 {
		t.wanted = true
		return false
	}
	t.asked = true
	pp.cancelBeginLocked()
	return true
}

// cancelBegin records a CancelRequest about to go to the connection's
// backend, for whichever session; cancelDone, that Postgres took it.
func (pp *pipe) cancelBegin() {
	pp.mu.Lock()
	pp.cancelBeginLocked()
	pp.mu.Unlock()
}

func (pp *pipe) cancelBeginLocked() {
	pp.cancelsStarted++
	pp.inCancel.Add(1)
}

func (pp *pipe) cancelDone() {
	pp.mu.Lock()
	pp.cancelsFinished++
	pp.mu.Unlock()
	pp.inCancel.Done()
}

// write sends a batch, then whatever other sessions queued in out while
// it was being sent, until out stays empty. A failure breaks the pipe:
// the batches queued read it broken and run again elsewhere.
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
// queue it heads, into the session's buffer, whole. retry: there is no
// answer to pass on, and the batch should run again on a connection of
// its own: the connection broke (before or under this batch), the answer
// outgrew maxPipelinedAnswer, or the statement was canceled for another
// session.
func (sess *session) readShared(b *backend, injected []string) (answer []byte, retry bool) {
	pp := &b.pipe
	pp.mu.Lock()
	broken := pp.broken
	pp.mu.Unlock()
	if b.abandoned.Load() {
		return sess.deposedShared(b, sess.buf[:0]), false
	}
	if broken {
		return nil, true
	}
	chunk := sess.buf[:0]
	defer func() {
		if cap(chunk) > 2*maxPipelinedAnswer {
			chunk = make([]byte, 0, chunkSize+8<<10) // after an outsized message
		}
		sess.buf = chunk[:0]
	}()
	stripped, canceled := 0, false
	for {
		start := len(chunk)
		var typ byte
		var err error
		chunk, typ, err = readMessage(b.r, chunk)
		if err != nil {
			if b.abandoned.Load() {
				chunk = sess.deposedShared(b, chunk[:0])
				return chunk, false
			}
			sess.breakShared(b)
			return nil, true
		}
		switch typ {
		case msgErrorResponse:
			demoteFatal(chunk[start:])
			canceled = canceled || pgerr.Code(pgwire.ParseError(chunk[start:])) == pgerr.QueryCanceled
			if bytes.Contains(chunk[start:], resultTypeChanged) {
				// A statement prepared here is stale (its tables
				// changed): the connection closes once its batches are
				// done, and the statements are prepared afresh elsewhere.
				b.retired.Store(true)
			}
		case msgParseComplete:
			if stripped < len(injected) {
				stripped++
				chunk = chunk[:start]
			}
		case msgCopyInResponse, msgCopyBoth:
			// Not an autocommit statement after all: the connection is
			// in a state no other session may share.
			return sess.abandonShared(b, chunk[:start], "a COPY"), false
		case msgReadyForQuery:
			if chunk[len(chunk)-1] != 'I' {
				return sess.abandonShared(b, chunk[:start], "an open transaction"), false
			}
			pp.mu.Lock()
			if stripped < len(injected) {
				// A Parse failed: it and those after it prepared nothing.
				for _, name := range injected[stripped:] {
					delete(b.prepared, name)
				}
			}
			// A cancel started by now and not finished when the batch was
			// written may have been someone else's.
			t := sess.turn
			foreign := canceled && !t.asked && pp.cancelsStarted != t.finishedAtWrite
			pp.mu.Unlock()
			if foreign {
				return nil, true
			}
			return chunk, false
		}
		if len(chunk) > maxPipelinedAnswer {
			// Too much to hold: the statement runs again on a connection
			// of its own, where its answer streams. Closing this one ends
			// it; the batches behind it never started.
			sess.breakShared(b)
			return nil, true
		}
	}
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

// breakShared marks a shared connection broken and closes it: the
// batches queued on it run again elsewhere.
func (sess *session) breakShared(b *backend) {
	b.pipe.mu.Lock()
	b.pipe.broken, b.broken = true, true
	b.pipe.mu.Unlock()
	b.closeConn()
}

// deposedShared answers a pipelined read whose connection the pool
// abandoned (depose.go) with 08001 rather than running it again here: a
// read has no side effects, so the router may run it on the new primary.
func (sess *session) deposedShared(b *backend, dst []byte) []byte {
	sess.breakShared(b)
	dst = appendErrorResponse(dst, "ERROR", "08001", errDeposedText(true))
	return pgwire.AppendReadyForQuery(dst, 'I')
}

// abandonShared closes a shared connection that a batch left in a state
// no other session may share and returns the batch's answer, ending with
// an error: closing the connection rolled its transaction back, and the
// batches queued behind it, which ran inside that transaction, run again.
func (sess *session) abandonShared(b *backend, chunk []byte, state string) []byte {
	sess.breakShared(b)
	chunk = appendErrorResponse(chunk, "ERROR", pgerr.FeatureNotSupported,
		"the statement was sent as autocommit but left "+state+" on a shared connection; it was rolled back")
	return pgwire.AppendReadyForQuery(chunk, 'I')
}

// sameSettingsAs reports whether b carries exactly the settings listed.
func sameSettingsAs(b *backend, settings []*pb.Setting) bool {
	if len(settings) == 0 {
		return b.settings == ""
	}
	return sameSettings(b.lastSettings, settings)
}
