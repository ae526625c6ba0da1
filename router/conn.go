package router

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/router/planner"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// clientConn is one client connection and its session. Its goroutine
// (serve) owns every field; cancelRunning and terminate are the only
// entries from other goroutines.
type clientConn struct {
	srv *Server
	nc  net.Conn
	rd  reader
	// fwd, fwdEmit and sidecarBatch serve single-shard statements (exec.go),
	// one at a time.
	fwd          forwarder
	fwdEmit      func(chunk []byte, last bool) error
	sidecarBatch pb.Batch
	// autoFrontend, autoPrepared and autoStatements serve auto-prepared
	// reads (autoprepare.go).
	autoFrontend   []byte
	autoPrepared   [1]*pb.PreparedStatement
	autoStatements map[*planner.AutoPrepared]*pb.PreparedStatement
	// searchPathMemo is the resolved search_path (route.go).
	searchPathMemo searchPathMemo
	// seqs is what currval and lastval answer (sequence.go).
	seqs sessionSequences
	// analyzing, while EXPLAIN (TESSERA, ANALYZE) runs its statement,
	// takes each shard's rows and time (analyze.go).
	analyzing *analysis
	// w is written by the connection's goroutine and, once the session
	// is pinned, by the backend sessions' listeners delivering
	// notifications (pushAsync); wmu orders them.
	wmu sync.Mutex
	w   *bufio.Writer
	// out holds messages the router composed itself; they are written
	// before anything forwarded next, which keeps answers in order.
	out     []byte
	tlsDone bool

	user, database string
	pid, secretKey uint32
	// admission is what the connection counts for (admission.go).
	admission admission

	settings sessionSettings
	stmts    map[string]*prepared // named prepared statements
	// ownClosed: per shard, statements the client closed that its
	// pinned backend has under the client's names (ownnames.go).
	ownClosed map[string][]string
	unnamed   *prepared
	portals   map[string]string // portal name -> shard it was bound on
	// authRels are relations this session made that exist on the
	// authoritative shard only (follow.go).
	authRels map[string]bool
	// cursors: the shard each cursor the session declared runs on, for
	// FETCH, MOVE and CLOSE.
	cursors  map[string]string
	backends map[string]*backendSession
	tx       txState
	batch    extBatch
	// bindParams is reused for every Bind; its values point into the
	// message being handled.
	bindParams bindParams
	// bindRouted is the route of a batch's first Bind (bindTarget).
	bindRouted routed
	copyIn     *backendSession // COPY FROM STDIN in progress
	copyBuf    []byte          // COPY data not yet sent
	// copyExtended: the COPY was started by Execute, so it ends at the
	// Sync after CopyDone (copyEnded), not at CopyDone.
	copyExtended, copyEnded bool
	copyInto                *copyInto // COPY split by shard (copyinto.go); copyIn is its first shard's
	// sessionPinned: the session did something that lives in its backend
	// (temporary table, advisory lock, LISTEN, ...), so from now on every
	// shard keeps one backend for it.
	sessionPinned bool

	// cancelToken lets a CancelRequest reach the statement in flight
	// through its sidecar; runningOn is where it runs (under runMu), or
	// streaming, where a read the engine merges runs (shardstream.go).
	cancelToken string
	runMu       sync.Mutex
	runningOn   *backendSession
	streaming   []*backendSession
	// idle is where the goroutine waits, for Drain (drain.go).
	idle atomic.Int32
	// stat accounts for the statement being served (stmtstat.go).
	stat stmtStat
}

// backendSession is the client session's stream to one instance.
type backendSession struct {
	shard string
	inst  *instance
	sess  *sidecar.ClientSession
	gen   uint64 // shards.gen when inst was last confirmed as the pick
}

func newClientConn(srv *Server, nc net.Conn) *clientConn {
	return &clientConn{
		srv:      srv,
		nc:       nc,
		rd:       reader{r: bufio.NewReaderSize(nc, 16<<10), max: maxAuthMessage, preAuth: true},
		w:        bufio.NewWriterSize(nc, 32<<10),
		stmts:    map[string]*prepared{},
		portals:  map[string]string{},
		backends: map[string]*backendSession{},
		batch:    extBatch{group: -1},
		settings: sessionSettings{autoPrepDefault: autoPrepDefault(srv.cfg.NoAutoPrepare), commitDefault: srv.cfg.Commit},
	}
}

// serve runs the connection to its end. A panic ends this connection
// only, with an internal error, never the router.
func (c *clientConn) serve() {
	defer c.close()
	defer func() {
		if p := recover(); p != nil {
			c.srv.log.Error("router connection panicked", "panic", p, "stack", string(debug.Stack()))
			c.out = c.out[:0]
			c.fatal(pgerr.New(pgerr.InternalError, "internal error in the router: %v", p))
		}
	}()
	ctx := context.Background()
	if !c.admit(ctx) {
		return
	}
	if err := c.sendSessionStart(ctx); err != nil {
		c.fatal(err)
		return
	}
	// The first wait follows the login, not a statement: Drain may close
	// the session there only once it has stayed idle (drain.go).
	atStatementEnd, loggedIn := true, true
	for {
		if err := c.waitForMessage(atStatementEnd, loggedIn); err != nil {
			c.fatal(err)
			return
		}
		if err := c.flush(); err != nil {
			return
		}
		typ, msg, err := c.rd.next()
		if !c.messageArrived() {
			return
		}
		loggedIn = false
		if err != nil {
			if !isDisconnect(err) {
				c.fatal(err)
			}
			return
		}
		c.statementBegins(typ)
		err = c.handle(typ, msg)
		switch atStatementEnd = typ == 'Q' || typ == 'S'; {
		case typ == 'Q' && len(msg) > 5:
			c.statementEnds(msg[5 : len(msg)-1])
		case typ == 'S':
			c.statementEnds(nil)
		}
		if err != nil {
			if errors.Is(err, errTerminate) {
				return
			}
			c.fatal(err)
			return
		}
	}
}

var errTerminate = errors.New("terminate")

// handle dispatches one client message. An error ends the connection.
func (c *clientConn) handle(typ byte, msg []byte) error {
	if c.copyIn != nil {
		return c.copyMessage(typ, msg)
	}
	switch typ {
	case 'Q':
		if c.insightsCommand(msg) {
			return nil
		}
		return c.simpleQuery(msg)
	case 'P', 'B', 'D', 'E', 'C', 'H':
		return c.extended(typ, msg)
	case 'S':
		return c.sync()
	case 'X':
		return errTerminate
	case 'd', 'c', 'f':
		// COPY messages outside COPY are ignored, as Postgres does.
		return nil
	}
	return pgerr.New(pgerr.ProtocolViolation, "invalid frontend message type %q", typ)
}

// fatal sends a FATAL error; the connection then closes.
func (c *clientConn) fatal(err error) {
	c.out = appendError(c.out, "FATAL", err)
	c.flush()
}

func (c *clientConn) flush() error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writeQueued(); err != nil {
		return err
	}
	return c.w.Flush()
}

// write forwards answer bytes after what the router queued itself.
func (c *clientConn) write(b []byte) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if err := c.writeQueued(); err != nil {
		return err
	}
	c.stat.scan(b)
	_, err := c.w.Write(b)
	return err
}

// writeQueued moves what the router composed (c.out) to the client's
// buffer. c.wmu must be held.
func (c *clientConn) writeQueued() error {
	if len(c.out) == 0 {
		return nil
	}
	c.stat.scanComposed(c.out)
	if _, err := c.w.Write(c.out); err != nil {
		return err
	}
	c.out = c.out[:0]
	return nil
}

// pushAsync delivers messages a pinned backend sent while the session was
// idle (NotificationResponse, NoticeResponse) to the client at once, as
// Postgres does, between whole messages of whatever else is under way.
// A write error is left for the connection's goroutine to meet.
func (c *clientConn) pushAsync(msgs []byte) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if _, err := c.w.Write(msgs); err == nil {
		c.w.Flush()
	}
}

// close ends the backend streams: the sidecars roll back what the session
// left open and return their connections clean.
func (c *clientConn) close() {
	for _, b := range c.backends {
		b.inst.sessions.untrack(b.sess)
		b.sess.Close()
	}
	c.nc.Close()
}

// terminate closes the client connection from another goroutine.
func (c *clientConn) terminate() {
	c.cancelRunning()
	c.nc.Close()
}

// cancelRunning cancels the statement in flight, if any, as Postgres
// cancels on a CancelRequest.
func (c *clientConn) cancelRunning() {
	c.runMu.Lock()
	running := append([]*backendSession(nil), c.streaming...)
	if c.runningOn != nil {
		running = append(running, c.runningOn)
	}
	c.runMu.Unlock()
	for _, b := range running {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		b.inst.client.Cancel(ctx, &pb.CancelRequest{CancelToken: c.cancelToken})
		cancel()
	}
}

func isDisconnect(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, net.ErrClosed)
}

// sendSessionStart sends the parameters a client learns at startup (as
// the authoritative shard reports them for this session), BackendKeyData
// and ReadyForQuery.
func (c *clientConn) sendSessionStart(ctx context.Context) error {
	// The cancel key comes first: sessions opened from now on carry the
	// token derived from it.
	c.srv.register(c)
	params, err := c.reportedParameters(ctx)
	if err != nil {
		return err
	}
	for _, p := range params {
		c.out = appendParameterStatus(c.out, p[0], p[1])
	}
	var key [8]byte
	key[0], key[1], key[2], key[3] = byte(c.pid>>24), byte(c.pid>>16), byte(c.pid>>8), byte(c.pid)
	key[4], key[5], key[6], key[7] = byte(c.secretKey>>24), byte(c.secretKey>>16), byte(c.secretKey>>8), byte(c.secretKey)
	c.out = appendMsg(c.out, 'K', key[:])
	c.out = appendReady(c.out, 'I')
	return nil
}

// session returns the client's stream to the shard's primary (or a
// replica), opening it on first use.
func (c *clientConn) session(ctx context.Context, shard string, replica bool) (*backendSession, error) {
	key := shard
	if replica {
		key += "\x00replica"
	}
	return c.sessionAt(ctx, key, shard, replica, true)
}

// sessionAt returns the stream the session keeps under key to an
// instance of shard, opening it on first use and again when the shard's
// instances changed (a stream of an open transaction, inTx, is kept: its
// transaction lives there).
func (c *clientConn) sessionAt(ctx context.Context, key, shard string, replica, inTx bool) (*backendSession, error) {
	gen := c.srv.shards.gen.Load()
	b := c.backends[key]
	if b != nil && (b.gen == gen || inTx && c.tx.has(shard)) {
		return b, nil
	}
	in, err := c.srv.shards.pick(shard, replica)
	if err != nil {
		return nil, err
	}
	if b != nil {
		if b.inst == in {
			b.gen = gen
			return b, nil
		}
		// The primary moved (or the replica went): what this session held
		// on the old instance is gone with it.
		c.dropSession(b)
	}

	var sess *sidecar.ClientSession
	if in.record().SessionAddr != "" {
		// The framed session port: the hot path without gRPC.
		sess, err = c.dialFramed(ctx, in)
	} else {
		sess, err = in.client.OpenCancelableSession(ctx, c.database, c.user, c.cancelToken)
	}
	if err != nil {
		return nil, err
	}
	in.sessions.track(sess)
	if !replica && c.srv.shards.gen.Load() != gen {
		// The shards changed while the stream opened: a primary deposed
		// meanwhile abandoned its sessions before this one was tracked.
		if now, err := c.srv.shards.pick(shard, false); err != nil || now != in {
			in.sessions.untrack(sess)
			sess.Abandon()
			return nil, pgerr.New("08006", "shard %s: its primary changed while a session opened on it", shard)
		}
	}
	b = &backendSession{shard: shard, inst: in, sess: sess, gen: gen}
	c.backends[key] = b
	return b, nil
}

// dialFramed opens a session on in's framed session port: by its unix
// socket when the sidecar has one and it answers here (the router runs on
// the sidecar's machine), else by TCP.
func (c *clientConn) dialFramed(ctx context.Context, in *instance) (*sidecar.ClientSession, error) {
	opts := c.srv.shards.dialOptions()
	// The path may name another machine's sidecar: the hello says which
	// instance this router means.
	opts.ShardUID, opts.InstanceID = in.record().ShardUID, in.record().InstanceID
	path := in.record().SessionSocket
	if !in.socketUsable(time.Now()) {
		path = ""
	}
	sess, socketFailed, err := sidecar.DialLocalSession(ctx, path, in.record().SessionAddr, opts, c.database, c.user, c.cancelToken)
	if socketFailed {
		in.socketFailed(time.Now())
	}
	return sess, err
}

// dropSession forgets a stream that failed.
func (c *clientConn) dropSession(b *backendSession) {
	for k, v := range c.backends {
		if v == b {
			delete(c.backends, k)
		}
	}
	b.inst.sessions.untrack(b.sess)
	b.sess.Close()
}

// run sends one batch to b and passes each answer chunk to emit, marking
// the last (sidecar.ClientSession.RunLast). A
// CancelRequest ends the wait.
func (c *clientConn) run(b *backendSession, batch *pb.Batch, emit func(chunk []byte, last bool) error) (sidecar.Result, error) {
	batch.Settings = c.settings.list
	if len(c.batch.shows) > 0 {
		batch.Settings = c.settings.withShown(c.batch.shows)
	}
	c.runMu.Lock()
	c.runningOn = b
	c.runMu.Unlock()
	c.stat.ranOn(b.shard)
	if an := c.analyzing; an != nil {
		// EXPLAIN (TESSERA, ANALYZE): the shard's rows and time.
		start, rows, inner := time.Now(), int64(0), emit
		emit = func(chunk []byte, last bool) error {
			rows += countRows(chunk)
			return inner(chunk, last)
		}
		defer func() { an.add(b.shard, rows, time.Since(start)) }()
	}
	res, err := b.sess.RunLast(batch, emit)
	c.runMu.Lock()
	c.runningOn = nil
	c.runMu.Unlock()
	if err != nil {
		c.dropSession(b)
	}
	return res, err
}
