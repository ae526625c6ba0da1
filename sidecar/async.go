package sidecar

import (
	"sync"
	"time"

	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// A backend pinned to a session for the session's life (LISTEN, among
// others) can speak while the session is idle: Postgres sends
// NotificationResponse as soon as a NOTIFY commits, and NoticeResponse or
// ParameterStatus at other times. Between batches a watcher reads those
// messages and sends them to the router at once, marked async, so that a
// client waiting for notifications gets them without sending a statement.
//
// Ownership of the backend's reader passes between the session goroutine
// (during a batch) and the watcher (between batches). stop hands it back:
// it sets a read deadline in the past, which wakes the watcher's Peek
// without consuming a byte, and the watcher only reads a message it has
// already seen the first byte of while holding mu, which stop takes too,
// so a message is never cut in half.

// asyncTypes are the backend messages Postgres sends outside any query.
func asyncType(t byte) bool { return t == 'A' || t == 'N' || t == 'S' }

type watcher struct {
	b    *backend
	mu   sync.Mutex
	stop bool
	done chan struct{}
}

// watch starts a watcher on b, the session's pinned backend.
func (sess *session) watch(b *backend) {
	w := &watcher{b: b, done: make(chan struct{})}
	sess.watcher = w
	go func() {
		defer close(w.done)
		w.run(sess.stream)
	}()
}

// unwatch stops the watcher, if one runs, and waits for it: the session
// goroutine owns the backend again.
func (sess *session) unwatch() {
	w := sess.watcher
	if w == nil {
		return
	}
	sess.watcher = nil
	w.mu.Lock()
	w.stop = true
	w.b.conn.SetReadDeadline(time.Now())
	w.mu.Unlock()
	<-w.done
	w.b.conn.SetReadDeadline(time.Time{})
}

func (w *watcher) run(stream sessionStream) {
	var msg []byte
	for {
		if _, err := w.b.r.Peek(1); err != nil {
			// stop's deadline, or the connection died: the session
			// goroutine finds out with its next batch.
			return
		}
		w.mu.Lock()
		if w.stop {
			w.mu.Unlock()
			return
		}
		typ := byte(0)
		var err error
		msg, typ, err = readMessage(w.b.r, msg[:0])
		w.mu.Unlock()
		if err != nil {
			// The connection died; the next batch finds out.
			return
		}
		if !asyncType(typ) {
			// Nothing else may come from an idle backend: the stream is
			// out of step, and the next batch must not use it.
			w.b.conn.Close()
			return
		}
		if typ == msgErrorResponse {
			demoteFatal(msg)
		}
		if err := stream.Send(&pb.SessionResponse{Backend: msg, Async: true}); err != nil {
			return
		}
	}
}
