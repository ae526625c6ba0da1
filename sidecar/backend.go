package sidecar

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// chunkSize is the size at which a batch's answer is sent on to the
// router: large results stream through in pieces, never held whole.
const chunkSize = 32 << 10

// backend is one Postgres connection owned by a pool. It is used by one
// goroutine at a time: the pool hands it to a session, which hands it back.
type backend struct {
	conn    net.Conn
	sock    *sendThenWait // conn as r reads it; exchange sends through it
	r       *bufio.Reader
	pid     uint32
	secret  []byte
	expires time.Time // end of its (jittered) lifetime
	idleAt  time.Time // when it last went back to the pool

	txStatus byte // from the last ReadyForQuery: 'I', 'T' or 'E'
	// settings is the canonical form of the session settings applied by
	// applySettings; "" is the server default. lastSettings is the list
	// as the last session sent it, to skip recomputing settings for the
	// same session's next batch.
	settings     string
	lastSettings []*pb.Setting
	// prepared holds the names of the statements prepared on this
	// connection. Names are content-derived, so a name present means the
	// right statement is present.
	prepared map[string]struct{}
	// forgotStatements: the last answer held a DEALLOCATE ALL or DISCARD
	// ALL, which dropped the statements prepared, whatever prepared
	// says. staleStatements: it held "cached plan must not change result
	// type": a statement the batch used is of no use any more (its
	// tables changed), and is to be prepared afresh when next needed.
	forgotStatements, staleStatements bool
	// retired: the connection holds too many prepared statements
	// (PoolConfig.MaxConnStatements); it takes no more pipelined batches
	// and closes when it comes back to the pool.
	retired atomic.Bool
	broken  bool
	// abandoned: the instance stopped being its shard's primary and the
	// pool closed this connection from outside (depose.go), without
	// waiting on a Postgres that may be hung. Another goroutine sets it.
	abandoned atomic.Bool
	// owner is the pool that tracks the connection while it is open.
	owner *pool

	// inflight counts the batches pipelined on the connection while it
	// is shared (pipeline.go), under the pool's mutex; pipe orders them.
	inflight int
	pipe     pipe

	// cancelMu is held while a CancelRequest for a session's batch on
	// this connection, used by that session alone, is sent; cancelFor
	// names that session (its cancel token) while its batch runs. The
	// batch's end clears it under the lock, so no cancel meant for it
	// is still on its way when the connection serves someone else.
	cancelMu  sync.Mutex
	cancelFor string
}

// limitStatements retires b once it holds more than max prepared
// statements; callers check after recording new ones.
func (b *backend) limitStatements(max int) {
	if len(b.prepared) > max {
		b.retired.Store(true)
	}
}

// recentlyIdle reports whether an idle connection may be used without a
// probe: it came back from its last use moments ago, within its lifetime,
// and nothing arrived since.
func (b *backend) recentlyIdle() bool {
	now := time.Now()
	return now.Before(b.expires) && now.Sub(b.idleAt) < recentlyUsed && b.r.Buffered() == 0
}

// dialBackend opens a connection over the instance's private unix socket
// and takes it over from pgconn after startup, to speak raw protocol.
func dialBackend(ctx context.Context, connString string, lifetime time.Duration) (*backend, error) {
	cfg, err := pgconn.ParseConfig(connString)
	if err != nil {
		return nil, pgerr.New("08001", "connecting to postgres: %v", err)
	}
	return dialBackendConfig(ctx, cfg, lifetime)
}

func dialBackendConfig(ctx context.Context, cfg *pgconn.Config, lifetime time.Duration) (*backend, error) {
	conn, err := pgconn.ConnectConfig(ctx, cfg)
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			return nil, &pgerr.Error{Code: pe.Code, Message: pe.Message}
		}
		// 08001: the statement never reached Postgres, so a router may
		// safely run it again once the instance (or a new primary) is back.
		return nil, pgerr.New("08001", "connecting to postgres: %v", err)
	}
	// pgconn may have started its background reader during startup (a
	// write slower than 15 ms, as under load): still blocked in a Read
	// of the socket, it would take the first answer the sidecar waits
	// for, and the session would wait forever. SyncConn stops it and
	// drains pgconn's buffers before the socket changes hands.
	if err := conn.SyncConn(ctx); err != nil {
		conn.Close(ctx)
		return nil, pgerr.New("08001", "taking over postgres connection: %v", err)
	}
	h, err := conn.Hijack()
	if err != nil {
		conn.Close(ctx)
		return nil, pgerr.New(pgerr.InternalError, "taking over postgres connection: %v", err)
	}
	sock := newSendThenWait(h.Conn)
	return &backend{
		conn:     h.Conn,
		sock:     sock,
		r:        bufio.NewReaderSize(sock, 64<<10),
		pid:      h.PID,
		secret:   h.SecretKey,
		expires:  time.Now().Add(lifetime),
		txStatus: 'I',
		prepared: map[string]struct{}{},
	}, nil
}

func (b *backend) close() {
	b.broken = true
	b.closeConn()
}

// abandon closes the connection from another goroutine than its user's,
// which meets a failed read or write and ends its batch (lost).
func (b *backend) abandon() {
	b.abandoned.Store(true)
	b.conn.Close()
}

// closeConn ends the connection without marking the backend: a shared
// one is marked under its pipe's mutex (pipeline.go).
func (b *backend) closeConn() {
	if b.owner != nil {
		b.owner.forget(b)
	}
	if b.abandoned.Load() {
		// Closed already; Postgres may not be reading.
		return
	}
	// Terminate tells Postgres to end the backend at once rather than
	// noticing the closed socket later.
	b.conn.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	b.conn.Write([]byte{'X', 0, 0, 0, 4})
	b.conn.Close()
}

// alive reports whether an idle connection is still usable: nothing may
// have arrived while it sat in the pool (Postgres sends a FATAL error
// before it terminates a backend) and the socket must be open.
func (b *backend) alive() bool {
	if b.broken || b.r.Buffered() > 0 {
		return false
	}
	b.conn.SetReadDeadline(time.Now())
	_, err := b.r.Peek(1)
	b.conn.SetReadDeadline(time.Time{})
	return errors.Is(err, os.ErrDeadlineExceeded)
}

// errNotSent: the batch could not be written to a pooled connection that
// had died; it never reached Postgres.
var errNotSent = errors.New("the connection died before the batch was sent")

// answer receives the chunks of a batch's answer before its last.
type answer func(chunk []byte) error

// exchange writes frontend messages and streams the backend's messages to
// emit until ReadyForQuery, or CopyInResponse when the backend waits for
// COPY data. The first strip ParseComplete messages are dropped: they
// answer Parse messages the sidecar injected, which the router never sent.
// buf is scratch space for the chunks. A failure of the connection closes
// the backend and ends the answer with an ErrorResponse and ReadyForQuery.
//
// The last chunk, the one ending in ReadyForQuery or CopyInResponse, is
// returned instead of emitted, with the transaction status to report and
// whether COPY data is awaited: the caller puts the backend back in the
// pool first, so that by the time the router sees the end of the answer
// the backend is free for its next batch. The returned chunk lives in the
// scratch buffer, which the caller reuses after sending it.
//
// With resendable set, a write that fails (the connection died idle in the
// pool, as after a restart or a fence) closes the backend and returns
// errNotSent without answering, so the caller can send the batch on
// another connection: nothing reached Postgres.
func (b *backend) exchange(frontend []byte, strip int, buf []byte, resendable bool, emit answer) (last answerEnd, stripped int, err error) {
	// Sent by the first read below that reaches the socket, which then
	// waits for the answer.
	err = b.sock.send(frontend)
	chunk := buf[:0]
	for err == nil {
		start := len(chunk)
		var typ byte
		chunk, typ, err = readMessage(b.r, chunk)
		if err != nil {
			break
		}
		switch typ {
		case msgErrorResponse:
			demoteFatal(chunk[start:])
			if bytes.Contains(chunk[start:], resultTypeChanged) {
				b.staleStatements = true
			}
		case msgCommandComplete:
			tag := chunk[start+5:]
			if bytes.Equal(tag, deallocateAllTag) || bytes.Equal(tag, discardAllTag) {
				b.forgotStatements = true
			}
		case msgParseComplete:
			if stripped < strip {
				stripped++
				chunk = chunk[:start]
			}
		case msgReadyForQuery:
			b.txStatus = chunk[len(chunk)-1]
			return answerEnd{chunk, b.txStatus, false}, stripped, nil
		case msgCopyInResponse:
			return answerEnd{chunk, 'T', true}, stripped, nil
		case msgCopyBoth:
			b.close()
			chunk = appendErrorResponse(chunk[:start], "ERROR", pgerr.FeatureNotSupported, "COPY BOTH (replication) is not supported through the sidecar")
			return answerEnd{pgwire.AppendReadyForQuery(chunk, 'I'), 'I', false}, stripped, nil
		}
		if len(chunk) >= chunkSize {
			if err := emit(chunk); err != nil {
				// The router is gone mid-answer: the backend is in an
				// unknown state and will be closed.
				b.broken = true
				return answerEnd{chunk: chunk[:0]}, stripped, err
			}
			chunk = chunk[:0]
		}
	}
	notSent := isSendError(err) && stripped == 0 && len(chunk) == 0
	if b.abandoned.Load() {
		// Not sent again on this instance: its Postgres may be hung.
		return b.deposed(chunk, notSent), stripped, nil
	}
	if resendable && notSent {
		b.close()
		return answerEnd{chunk: buf[:0]}, 0, errNotSent
	}
	return b.lost(chunk, err), stripped, nil
}

// What exchange looks for in answers (see backend.forgotStatements):
// the CommandComplete tags, and the SQLSTATE and start of the error
// Postgres reports when a prepared statement's result type changed.
var (
	deallocateAllTag  = []byte("DEALLOCATE ALL\x00")
	discardAllTag     = []byte("DISCARD ALL\x00")
	resultTypeChanged = []byte("C0A000\x00Mcached plan must not change result type")
)

// answerEnd is the last chunk of an answer and what it leaves behind.
type answerEnd struct {
	chunk    []byte
	txStatus byte
	copyIn   bool
}

// lost ends the answer of a batch whose connection failed.
func (b *backend) lost(chunk []byte, cause error) answerEnd {
	b.close()
	chunk = appendErrorResponse(chunk, "ERROR", "08006", "lost the connection to postgres: "+cause.Error())
	b.txStatus = 'I'
	return answerEnd{pgwire.AppendReadyForQuery(chunk, 'I'), 'I', false}
}

// deposed ends the answer of a batch whose connection the pool abandoned
// because the instance stopped being its shard's primary. A batch that
// provably never reached Postgres gets 08001, which tells a router it may
// run it on the new primary; one that did gets 08006: whether it
// committed on the old primary is unknown, as after any lost connection.
func (b *backend) deposed(chunk []byte, notSent bool) answerEnd {
	b.close()
	b.txStatus = 'I'
	chunk = appendErrorResponse(chunk, "ERROR", errDeposedCode(notSent), errDeposedText(notSent))
	return answerEnd{pgwire.AppendReadyForQuery(chunk, 'I'), 'I', false}
}

func errDeposedCode(notSent bool) string {
	if notSent {
		return "08001"
	}
	return "08006"
}

func errDeposedText(notSent bool) string {
	if notSent {
		return "the instance stopped being its shard's primary before the statement was sent; it did not run"
	}
	return "the instance stopped being its shard's primary while the statement ran; its connection was closed and whether it committed is unknown"
}

// closeStatements closes the statements on b (Close works in a failed
// transaction too), so that their next use prepares them afresh.
func (b *backend) closeStatements(stmts []*pb.PreparedStatement) {
	if len(stmts) == 0 {
		return
	}
	var msgs []byte
	for _, ps := range stmts {
		delete(b.prepared, ps.Name)
		msgs = appendCloseStatement(msgs, ps.Name)
	}
	msgs = append(msgs, 'S', 0, 0, 0, 4)
	if _, err := b.conn.Write(msgs); err != nil {
		b.close()
		return
	}
	b.drain()
}

// simple runs internal SQL (settings, reset) and discards its answer,
// returning the first error Postgres reported.
func (b *backend) simple(sql string) error {
	if _, err := b.conn.Write(pgwire.AppendQuery(nil, sql)); err != nil {
		b.close()
		return err
	}
	return b.drain()
}

// drain reads up to ReadyForQuery, returning the first ErrorResponse.
func (b *backend) drain() error {
	var first error
	var msg []byte
	for {
		var typ byte
		var err error
		msg, typ, err = readMessage(b.r, msg[:0])
		if err != nil {
			b.close()
			return err
		}
		switch typ {
		case msgErrorResponse:
			if first == nil {
				first = pgwire.ParseError(msg)
			}
		case msgReadyForQuery:
			b.txStatus = msg[5]
			return first
		}
	}
}

// resetSQL removes everything a session may have left on a connection:
// DISCARD ALL, less DISCARD PLANS (harmless to keep). Prepared statements
// go too, because a session-pinned client may have made its own with SQL
// PREPARE; the content-named ones are prepared again where needed.
const resetSQL = "CLOSE ALL; SET SESSION AUTHORIZATION DEFAULT; RESET ALL; DEALLOCATE ALL; UNLISTEN *; " +
	"SELECT pg_advisory_unlock_all(); DISCARD TEMP; DISCARD SEQUENCES"

// reset makes a session-pinned connection clean for its next user.
func (b *backend) reset() error {
	sql := resetSQL
	if b.txStatus != 'I' {
		sql = "ROLLBACK; " + sql
	}
	if err := b.simple(sql); err != nil {
		return err
	}
	b.settings, b.lastSettings = "", nil
	clear(b.prepared)
	return nil
}

// rollback ends a transaction the session left open.
func (b *backend) rollback() error {
	if b.txStatus == 'I' {
		return nil
	}
	return b.simple("ROLLBACK")
}

// settingsKey is the canonical form of a set of settings.
func settingsKey(settings []setting) string {
	if len(settings) == 0 {
		return ""
	}
	sorted := append([]setting(nil), settings...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].name < sorted[j].name })
	var sb strings.Builder
	for _, s := range sorted {
		sb.WriteString(s.name)
		sb.WriteByte(0)
		sb.WriteString(s.value)
		sb.WriteByte(0)
	}
	return sb.String()
}

type setting struct{ name, value string }

// applySettings gives the connection exactly the session's settings, when
// they differ from what it has and no transaction is open (inside one the
// pinned connection already carries the session's state).
func (b *backend) applySettings(settings []setting, key string) error {
	if key == b.settings || b.txStatus != 'I' {
		return nil
	}
	var sb strings.Builder
	// RESET ALL leaves session_authorization as it is: a session that
	// set it and reset it must not leave it behind on this connection.
	sb.WriteString("SET SESSION AUTHORIZATION DEFAULT; RESET ALL")
	for _, s := range settings {
		fmt.Fprintf(&sb, "; SELECT pg_catalog.set_config(%s, %s, false)", pgwire.QuoteLiteral(s.name), pgwire.QuoteLiteral(s.value))
	}
	if err := b.simple(sb.String()); err != nil {
		// A half-applied set of settings is unknown state.
		b.settings, b.lastSettings = "\x00unknown", nil
		return err
	}
	b.settings = key
	return nil
}
