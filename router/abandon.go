package router

import (
	"sync"

	"github.com/tesseradb/tessera/sidecar"
)

// A primary cut off by the network never answers: a statement sent to it
// waits for its sidecar's reply on a TCP connection that stays open,
// with nothing to end the wait (no reset ever comes), and a transaction
// pinned there waits the same way at its next statement. Once the shard's
// state names another primary, nothing such a session could still get
// from the old one matters: its client must learn that the connection
// was lost and go on with the new primary. So each instance keeps the
// router's sessions open on it (openSessions), and when the state moves
// a shard's primary away from an instance, or the instance's discovery
// record goes away, the router abandons them: it closes their
// connections at once, without a word to the sidecar. A statement
// waiting for its answer gets 08006 (whether it committed on the old
// primary is unknown, as after any lost connection; the sidecar of a
// cut-off primary refuses writes once it loses etcd, sidecar/isolation.go);
// a session's next statement opens a stream to the new primary. The
// sidecar of a deposed primary abandons its side the same way
// (sidecar/depose.go) when it can hear of the change.

// openSessions are the router's sessions open on one instance.
type openSessions struct {
	mu  sync.Mutex
	set map[*sidecar.ClientSession]struct{}
}

// track notes a session opened on the instance.
func (o *openSessions) track(sess *sidecar.ClientSession) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.set == nil {
		o.set = map[*sidecar.ClientSession]struct{}{}
	}
	o.set[sess] = struct{}{}
}

// untrack forgets a session that is being closed.
func (o *openSessions) untrack(sess *sidecar.ClientSession) {
	o.mu.Lock()
	delete(o.set, sess)
	o.mu.Unlock()
}

// abandon closes every session open on the instance and returns how
// many it closed. A session picked before the change and opened after
// it is caught by its opener (clientConn.sessionAt), which looks again.
func (o *openSessions) abandon() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := len(o.set)
	for sess := range o.set {
		sess.Abandon()
	}
	clear(o.set)
	return n
}
