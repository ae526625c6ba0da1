package router

import (
	"log/slog"
	"net"
	"os"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// failingListener fails its first failures Accepts as a process out of
// file descriptors does, then reports itself closed.
type failingListener struct {
	net.Listener
	failures int32
	calls    atomic.Int32
}

func (l *failingListener) Accept() (net.Conn, error) {
	if l.calls.Add(1) <= l.failures {
		return nil, &net.OpError{Op: "accept", Net: "tcp", Err: os.NewSyscallError("accept4", syscall.EMFILE)}
	}
	return nil, net.ErrClosed
}

// TestAcceptSurvivesFailures: a failed Accept (EMFILE) is retried after a
// pause; only a closed listener ends the loop. It used to end it at the
// first error, after which the router took no client until restarted.
func TestAcceptSurvivesFailures(t *testing.T) {
	l := &failingListener{failures: 3}
	s := &Server{lis: l, log: slog.New(slog.DiscardHandler), stopAccept: make(chan struct{}), acceptDone: make(chan struct{})}
	go s.accept()
	select {
	case <-s.acceptDone:
	case <-time.After(10 * time.Second):
		t.Fatal("the accept loop did not end on a closed listener")
	}
	if n := l.calls.Load(); n != 4 {
		t.Errorf("Accept called %d times, want 3 failures retried and then the close: 4", n)
	}
}
