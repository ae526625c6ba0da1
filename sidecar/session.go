package sidecar

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// session serves one Session stream: one router session's work on this
// instance. Its goroutine is the stream handler's; the only other
// goroutine that touches it is the idle-in-transaction timer, under mu.
type session struct {
	srv    *Server
	pool   *pool
	stream sessionStream
	buf    []byte // scratch for answer chunks, reused across batches
	resp   pb.SessionResponse
	token  string // cancel token
	turn   *turn  // the session's place in a shared connection's queue

	mu            sync.Mutex
	pinned        *backend // held across batches, or nil
	sessionPinned bool     // pinned for the whole session (SESSION mode)
	copyIn        bool     // COPY FROM STDIN waits for data
	timer         *time.Timer
	timedOut      bool // the idle-in-transaction timeout ended the session

	// What the router sent with earlier batches and later ones refer to
	// (resolve): the last settings list, the prepared statements by name.
	settings   []*pb.Setting
	statements map[string]*pb.PreparedStatement

	// watcher forwards what the session-pinned backend says between
	// batches (async.go); only the session goroutine touches this field.
	watcher *watcher
}

// sessionStream is what a session needs of its transport: the Session
// RPC's stream, or a framed session connection (framed.go).
type sessionStream interface {
	Send(*pb.SessionResponse) error
	Recv() (*pb.SessionRequest, error)
	Context() context.Context
}

// Session implements the Session RPC.
func (s *Server) Session(stream pb.Sidecar_SessionServer) error {
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	return statusError(s.serveSession(stream, first.GetOpen()))
}

// serveSession runs one session until its client ends it. The error, if
// any, carries a SQLSTATE.
func (s *Server) serveSession(stream sessionStream, open *pb.Open) error {
	sess, err := s.newSession(stream, open)
	if err != nil {
		return err
	}
	defer sess.end()
	for {
		req, err := stream.Recv()
		if err != nil {
			return nil // the router ended the session
		}
		batch := req.GetBatch()
		if batch == nil {
			return pgerr.New(pgerr.ProtocolViolation, "expected a batch")
		}
		if err := sess.serve(stream.Context(), batch); err != nil {
			return err
		}
	}
}

// newSession starts a session as open says, answering on stream.
func (s *Server) newSession(stream sessionStream, open *pb.Open) (*session, error) {
	if open == nil || open.Database == "" || open.User == "" {
		return nil, pgerr.New(pgerr.ProtocolViolation, "a session must open with a database and a user")
	}
	return &session{srv: s, pool: s.pools.pool(open.Database, open.User), stream: stream, buf: make([]byte, 0, chunkSize+8<<10), token: open.CancelToken, turn: newTurn()}, nil
}

// serve runs one batch, its answer going to the session's stream, and
// watches a session-pinned backend until the next. An error ends the
// session.
func (sess *session) serve(ctx context.Context, batch *pb.Batch) error {
	if err := sess.resolve(batch); err != nil {
		return err
	}
	return sess.run(ctx, batch)
}

// run is serve for a batch that refers to nothing sent before.
func (sess *session) run(ctx context.Context, batch *pb.Batch) error {
	sess.unwatch()
	if err := sess.batch(ctx, batch); err != nil {
		return err
	}
	sess.mu.Lock()
	b, keep := sess.pinned, sess.sessionPinned && !sess.copyIn && !sess.timedOut
	sess.mu.Unlock()
	if b != nil && keep {
		sess.watch(b)
	}
	return nil
}

// resolve fills in what batch refers to from earlier batches of the
// session (Batch.same_settings, Batch.prepared_names), so that the rest
// of the session sees whole batches, and remembers what it brings.
func (sess *session) resolve(batch *pb.Batch) error {
	if batch.SameSettings {
		batch.Settings = sess.settings
	} else {
		sess.settings = batch.Settings
	}
	if batch.PreparedReset || sess.statements == nil {
		sess.statements = make(map[string]*pb.PreparedStatement)
	}
	for _, ps := range batch.Prepared {
		if _, ok := sess.statements[ps.Name]; !ok && len(sess.statements) >= maxSessionStatements {
			return pgerr.New(pgerr.ProtocolViolation, "a session may refer to at most %d prepared statements by name", maxSessionStatements)
		}
		sess.statements[ps.Name] = ps
	}
	for _, name := range batch.PreparedNames {
		ps, ok := sess.statements[name]
		if !ok {
			return pgerr.New(pgerr.ProtocolViolation, "the batch refers to prepared statement %q, which this session never sent", name)
		}
		batch.Prepared = append(batch.Prepared, ps)
	}
	return nil
}

// reply sends a whole answer the sidecar made itself (an error).
func (sess *session) reply(msgs []byte, tx byte) error {
	return sess.stream.Send(&pb.SessionResponse{Backend: msgs, Done: true, TxStatus: txStatus(tx)})
}

func (sess *session) fail(err error) error {
	tx := byte('I')
	if sess.pinned != nil {
		tx = sess.pinned.txStatus
	}
	return sess.reply(pgwire.AppendReadyForQuery(appendError(nil, err), tx), tx)
}

func (sess *session) batch(ctx context.Context, req *pb.Batch) error {
	sess.mu.Lock()
	if sess.timer != nil {
		sess.timer.Stop()
		sess.timer = nil
	}
	timedOut := sess.timedOut
	sess.mu.Unlock()
	if timedOut {
		msg := appendErrorResponse(nil, "FATAL", "25P03", "terminating connection due to idle-in-transaction timeout")
		sess.stream.Send(&pb.SessionResponse{Backend: msg, Done: true, TxStatus: pb.TxStatus_IDLE})
		return pgerr.New("25P03", "session ended by the idle-in-transaction timeout")
	}

	if sess.srv.fence.closed.Load() {
		return sess.refuseFenced(nil)
	}
	ending, err := frontendEnding(req.Frontend)
	if err != nil {
		return sess.fail(err)
	}
	if ending == 'd' && !sess.copyIn {
		return sess.fail(pgerr.New(pgerr.ProtocolViolation, "CopyData outside COPY FROM STDIN"))
	}
	if ending == 'H' {
		return sess.fail(pgerr.New(pgerr.FeatureNotSupported, "a batch must end with Sync or Query, not Flush"))
	}

	b := sess.pinned
	if req.Autocommit && b == nil && !sess.copyIn && req.Mode != pb.Mode_SESSION {
		if ok, err := sess.pipelined(req); ok {
			return err
		}
	}
	if sess.copyIn && ending == 'd' && b != nil {
		// More COPY data: Postgres answers only at CopyDone or CopyFail.
		if _, err := b.conn.Write(req.Frontend); err != nil {
			b.close()
			sess.release(b)
			return sess.fail(pgerr.New("08006", "lost the connection to postgres during COPY: %v", err))
		}
		return sess.stream.Send(&pb.SessionResponse{Done: true, TxStatus: pb.TxStatus_IN_TRANSACTION, CopyIn: true})
	}
	// A connection from the pool may have died while idle (Postgres
	// restarted, or fencing ended its sessions); a batch that could not
	// be sent on it goes out on a fresh one instead of failing.
	fromPool := b == nil
	for attempt := 0; ; attempt++ {
		if fromPool {
			if b, err = sess.pool.get(ctx); err != nil {
				return sess.fail(err)
			}
		}
		err := sess.send(b, req, fromPool && attempt < maxResends)
		if errors.Is(err, errSettingsNotSent) && b.abandoned.Load() {
			// Not sent again on a deposed instance (depose.go).
			sess.release(b)
			return sess.fail(pgerr.New("08001", "%s", errDeposedText(true)))
		}
		if errors.Is(err, errNotSent) || (fromPool && errors.Is(err, errSettingsNotSent) && attempt < maxResends) {
			// Its idle siblings most likely died with it.
			sess.release(b)
			sess.pool.closeIdle()
			continue
		}
		if errors.Is(err, errSettingsNotSent) {
			sess.release(b)
			return sess.fail(pgerr.New("08006", "lost the connection to postgres: %v", err))
		}
		return err
	}
}

// maxResends bounds how often one batch moves to a fresh connection.
const maxResends = 2

// errSettingsNotSent wraps a failure to apply the session's settings.
var errSettingsNotSent = errors.New("applying session settings")

// send runs one batch on b: the session's settings first if b has others,
// then the statements the batch needs prepared, then the batch.
func (sess *session) send(b *backend, req *pb.Batch, resendable bool) error {
	if req.Mode == pb.Mode_SESSION && !sess.sessionPinned && len(b.prepared) > 0 && b.txStatus == 'I' {
		// A session pinning the backend may look at its prepared
		// statements (pg_prepared_statements): it must find its own only,
		// not the content-named ones other sessions left.
		if err := b.simple("DEALLOCATE ALL"); err != nil {
			return fmt.Errorf("%w: %w", errSettingsNotSent, err)
		}
		clear(b.prepared)
	}
	if (len(req.Settings) > 0 || b.settings != "") && !sameSettings(b.lastSettings, req.Settings) {
		settings := make([]setting, len(req.Settings))
		for i, s := range req.Settings {
			settings[i] = setting{s.Name, s.Value}
		}
		if err := b.applySettings(settings, settingsKey(settings)); err != nil {
			if b.broken {
				return fmt.Errorf("%w: %w", errSettingsNotSent, err)
			}
			sess.keepOrRelease(b, req.Mode, false)
			return sess.fail(err)
		}
		b.lastSettings = req.Settings
	}

	frontend := req.Frontend
	var injected []*pb.PreparedStatement
	for _, ps := range req.Prepared {
		if _, ok := b.prepared[ps.Name]; !ok {
			injected = append(injected, ps)
		}
	}
	if len(injected) > 0 {
		var prefix []byte
		for _, ps := range injected {
			prefix = appendParse(prefix, ps.Name, ps.Query, ps.ParamOids)
		}
		frontend = append(prefix, req.Frontend...)
	}

	// Checked again now that the batch holds its connection (fence.go):
	// the gate may have closed while it waited for one.
	if sess.srv.fence.closed.Load() {
		return sess.refuseFenced(b)
	}
	sess.srv.cancels.start(sess.token, b, nil)
	if sess.token != "" {
		b.cancelMu.Lock()
		b.cancelFor = sess.token
		b.cancelMu.Unlock()
	}
	last, stripped, err := b.exchange(frontend, len(injected), sess.buf, resendable, func(chunk []byte) error {
		return sess.emit(chunk, false, 0, false)
	})
	// Everything that touches b happens before it may go back to the
	// pool, where another session can take it at once.
	sess.srv.cancels.stop(sess.token)
	if sess.token != "" {
		b.cancelMu.Lock()
		b.cancelFor = ""
		b.cancelMu.Unlock()
	}
	sess.buf = last.chunk[:0]
	if errors.Is(err, errNotSent) {
		return err
	}
	for _, ps := range injected[:stripped] {
		b.prepared[ps.Name] = struct{}{}
	}
	if b.forgotStatements {
		clear(b.prepared)
		b.forgotStatements = false
	}
	if b.staleStatements && !b.broken {
		b.staleStatements = false
		b.closeStatements(req.Prepared)
	}
	b.limitStatements(sess.pool.cfg.maxConnStatements())
	sess.copyIn = last.copyIn && err == nil && !b.broken
	sess.keepOrRelease(b, req.Mode, sess.copyIn)
	if err != nil {
		return err
	}
	// The end of the answer goes out only now: a router that sees it may
	// send its next batch at once, and should find b in the pool.
	return sess.emit(last.chunk, true, last.txStatus, last.copyIn)
}

// emit sends one chunk of an answer to the router. The response is
// reused: Send encodes it before returning.
func (sess *session) emit(chunk []byte, done bool, tx byte, copyIn bool) error {
	r := &sess.resp
	r.Backend, r.Done, r.TxStatus, r.CopyIn = chunk, done, txStatus(tx), copyIn
	return sess.stream.Send(r)
}

// keepOrRelease keeps the backend pinned when the session needs it next
// (SESSION mode, an open transaction, COPY waiting for data) and returns
// it to the pool otherwise.
func (sess *session) keepOrRelease(b *backend, mode pb.Mode, copyIn bool) {
	switch {
	case b.broken:
		sess.release(b)
	case mode == pb.Mode_SESSION || sess.sessionPinned:
		sess.pinned, sess.sessionPinned = b, true
	case b.txStatus != 'I' || copyIn:
		// STATEMENT and TRANSACTION alike keep a backend whose
		// transaction is open: Postgres's status decides, not the mode.
		sess.pinned = b
	default:
		sess.release(b)
	}
	if sess.pinned != nil && b.txStatus != 'I' && !copyIn {
		sess.armIdleTimeout(b)
	}
}

// release hands the backend back to the pool, unpinning it.
func (sess *session) release(b *backend) {
	if sess.pinned == b {
		sess.pinned, sess.sessionPinned = nil, false
	}
	sess.pool.put(b)
}

// armIdleTimeout ends the session if its transaction stays idle too long,
// freeing the backend at once; the router learns of it on its next batch,
// as a Postgres client would.
func (sess *session) armIdleTimeout(b *backend) {
	d := sess.pool.cfg.IdleInTransactionTimeout
	if d <= 0 {
		return
	}
	sess.mu.Lock()
	defer sess.mu.Unlock()
	sess.timer = time.AfterFunc(d, func() {
		sess.mu.Lock()
		defer sess.mu.Unlock()
		if sess.pinned != b || sess.timer == nil {
			return // the session moved on
		}
		sess.timedOut = true
		b.close()
		sess.release(b)
	})
}

// end returns a pinned backend when the stream ends: the transaction the
// session left is rolled back, a COPY is failed, a session-pinned backend
// is reset; a backend that cannot be cleaned is closed.
func (sess *session) end() {
	sess.unwatch()
	sess.mu.Lock()
	if sess.timer != nil {
		sess.timer.Stop()
		sess.timer = nil
	}
	b := sess.pinned
	sess.mu.Unlock()
	if b == nil {
		return
	}
	var err error
	if sess.copyIn {
		if _, err = b.conn.Write([]byte{'f', 0, 0, 0, 5, 0, 'S', 0, 0, 0, 4}); err == nil {
			err = b.drain()
		}
	}
	if err == nil && sess.sessionPinned {
		err = b.reset()
	} else if err == nil {
		err = b.rollback()
	}
	if err != nil {
		b.close()
	}
	sess.release(b)
}

func txStatus(b byte) pb.TxStatus {
	switch b {
	case 'I':
		return pb.TxStatus_IDLE
	case 'T':
		return pb.TxStatus_IN_TRANSACTION
	case 'E':
		return pb.TxStatus_FAILED
	}
	return pb.TxStatus_TX_STATUS_UNSPECIFIED
}

// sameSettings reports whether two settings lists are equal in order: the
// cheap check that a session's next batch finds its own settings in place.
func sameSettings(a, b []*pb.Setting) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Name != b[i].Name || a[i].Value != b[i].Value {
			return false
		}
	}
	return true
}
