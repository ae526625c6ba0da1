package sidecar

import (
	"context"
	"crypto/subtle"
	"sync"

	"github.com/tesseradb/tessera/pgerr"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// A router in the same process as a sidecar (tessera dev runs both)
// opens sessions on it by function call: the
// router's goroutine runs the batch on the sidecar's pooled backend and
// gets each answer chunk as a call, without the framed port's two
// writes, two reads and two goroutine wake-ups per batch. The session
// is the same as on the framed port (pool, settings, prepared statements,
// pinning, cancel, idle-in-transaction timeout, watcher); only the
// transport differs. It is what makes the router one hop, as PgBouncer
// is, where a shard's sidecar runs in the router's process.
//
// Goroutines: a batch runs on the caller's goroutine, under the
// session's runMu; the watcher of a session-pinned backend sends
// asynchronous messages from its own, to Listen's function. Stop ends
// every in-process session, waiting for a batch in flight, before it
// closes the pools.

// inProcess holds the running sidecars of this process by shard and
// instance.
var inProcess sync.Map // inProcessKey → *Server

func inProcessKey(shardUID, instanceID string) string { return shardUID + "\x00" + instanceID }

// publishInProcess makes the sidecar reachable by function call.
func (s *Server) publishInProcess() {
	inProcess.Store(inProcessKey(s.cfg.ShardUID, s.cfg.InstanceID), s)
}

// withdrawInProcess ends the in-process sessions; Stop calls it.
func (s *Server) withdrawInProcess() {
	inProcess.CompareAndDelete(inProcessKey(s.cfg.ShardUID, s.cfg.InstanceID), s)
	s.localMu.Lock()
	locals := make([]*localStream, 0, len(s.locals))
	for l := range s.locals {
		locals = append(locals, l)
	}
	s.localMu.Unlock()
	for _, l := range locals {
		l.runMu.Lock()
		l.endLocked(pgerr.New("08006", "the sidecar of %s/%s stopped", s.cfg.ShardUID, s.cfg.InstanceID))
		l.runMu.Unlock()
	}
}

// openInProcess opens a session on the sidecar of this process that
// opts names, if one runs here; found is false otherwise.
func openInProcess(opts DialOptions, database, user, cancelToken string) (sess *ClientSession, found bool, err error) {
	if opts.ShardUID == "" || opts.InstanceID == "" {
		return nil, false, nil
	}
	v, ok := inProcess.Load(inProcessKey(opts.ShardUID, opts.InstanceID))
	if !ok {
		return nil, false, nil
	}
	s := v.(*Server)
	// The same credential as on any other path: being in the process is
	// not being in the cluster.
	if subtle.ConstantTimeCompare([]byte(opts.Secret), []byte(s.cfg.Secret)) != 1 {
		return nil, true, pgerr.New("28000", "sidecar: the cluster credential is missing or wrong")
	}
	l := &localStream{srv: s}
	l.sess, err = s.newSession(l, &pb.Open{Database: database, User: user, CancelToken: cancelToken})
	if err != nil {
		return nil, true, err
	}
	s.localMu.Lock()
	select {
	case <-s.stopping:
		s.localMu.Unlock()
		return nil, false, nil
	default:
	}
	s.locals[l] = struct{}{}
	s.localMu.Unlock()
	return &ClientSession{local: l, cancel: func() {}}, true, nil
}

// localStream is an in-process session: the sessionStream its session
// answers on, and what ClientSession calls instead of a transport.
type localStream struct {
	srv  *Server
	sess *session

	runMu  sync.Mutex // held by run and end: one batch at a time
	ended  error      // why the session ended, once it has
	emit   func(chunk []byte, last bool) error
	result Result
	done   bool // the batch's answer is complete

	// Asynchronous messages (the watcher's goroutine): to listen, or
	// held for the next answer until Listen.
	asyncMu sync.Mutex
	listen  func(msgs []byte)
	pending []byte
}

// run runs one batch, passing its answer to fn as ClientSession.RunLast
// does. batch's settings and prepared statements must not change
// afterwards: the session keeps them, as it would have decoded them.
func (l *localStream) run(batch *pb.Batch, fn func(chunk []byte, last bool) error) (Result, error) {
	l.runMu.Lock()
	defer l.runMu.Unlock()
	if l.ended != nil {
		return Result{}, l.ended
	}
	l.emit, l.done, l.result = fn, false, Result{}
	err := l.sess.run(l.srv.runCtx, batch)
	l.emit = nil
	if err != nil {
		l.endLocked(err)
		if !l.done {
			return Result{}, err
		}
		// The answer went out whole (the idle-in-transaction timeout's
		// FATAL error, say); the next batch learns the session is over.
	}
	return l.result, nil
}

// endLocked ends the session once, returning its backend clean.
func (l *localStream) endLocked(why error) {
	if l.ended != nil {
		return
	}
	l.ended = why
	l.sess.end()
	l.srv.localMu.Lock()
	delete(l.srv.locals, l)
	l.srv.localMu.Unlock()
}

func (l *localStream) close() {
	l.runMu.Lock()
	l.endLocked(errSessionClosed)
	l.runMu.Unlock()
}

var errSessionClosed = pgerr.New("08003", "the session is closed")

func (l *localStream) setListener(fn func(msgs []byte)) {
	l.asyncMu.Lock()
	l.listen = fn
	pending := l.pending
	l.pending = nil
	l.asyncMu.Unlock()
	if len(pending) > 0 {
		fn(pending)
	}
}

// Send takes the session's responses: answer chunks on the batch's
// goroutine, asynchronous messages on the watcher's.
func (l *localStream) Send(m *pb.SessionResponse) error {
	if m.Async {
		l.asyncMu.Lock()
		fn := l.listen
		if fn == nil {
			l.pending = append(l.pending, m.Backend...)
		}
		l.asyncMu.Unlock()
		if fn != nil {
			fn(append([]byte(nil), m.Backend...))
		}
		return nil
	}
	if l.emit == nil {
		return errSessionClosed
	}
	// Without Listen, what Postgres said between batches goes out before
	// the next answer, as on the framed port. The watcher has stopped by
	// the time a batch answers.
	l.asyncMu.Lock()
	pending := l.pending
	l.pending = nil
	l.asyncMu.Unlock()
	if len(pending) > 0 {
		if err := l.emit(pending, false); err != nil {
			return err
		}
	}
	if !m.Done {
		if len(m.Backend) == 0 {
			return nil
		}
		return l.emit(m.Backend, false)
	}
	if err := l.emit(m.Backend, true); err != nil {
		return err
	}
	l.done, l.result = true, Result{TxStatus: m.TxStatus, CopyIn: m.CopyIn}
	return nil
}

// Recv is never called: run hands the session its batches.
func (l *localStream) Recv() (*pb.SessionRequest, error) { return nil, errSessionClosed }

// Context ends when the sidecar stops, which ends a wait for the pool.
func (l *localStream) Context() context.Context { return l.srv.runCtx }
