package sidecar

import (
	"errors"
	"io"
	"net"
	"syscall"
)

// sendThenWait is a connection's byte source (under a bufio.Reader) that
// can send a request as the first step of waiting for its answer: the
// sidecar's connections to Postgres and a router's framed connection to
// a sidecar, whose peers always answer what they are sent.
//
// A proxy's floor is one read and one write per hop. Go's net.Conn adds a
// third call: Read always tries the socket before parking, and just after
// a request has been written the answer cannot be there yet, so that try
// always fails with EAGAIN. When a request is queued with send, the next
// Read writes it from inside the poller's read callback and parks at once;
// the first read it makes is the one that finds the answer. The write
// comes after the poller reset its readiness, so the answer's arrival is
// never missed. Bytes already buffered above it (an asynchronous message)
// are read first; the request goes out when the reader next needs the
// socket, which it must before the answer.
type sendThenWait struct {
	conn net.Conn
	raw  syscall.RawConn // nil when the connection has none: send writes at once
	// pending is written by the next Read before it waits.
	pending []byte
	// onReadable is Read's callback for raw, bound once; buf, n and err
	// are its arguments and results. Fields rather than a closure's
	// captures, which would be allocated on every Read.
	onReadable func(fd uintptr) bool
	buf        []byte
	n          int
	err        error
}

// errSend wraps a failure to write the request queued with send, which
// the next Read reports: the peer may have none of it.
type errSend struct{ err error }

func (e *errSend) Error() string { return "sending the request: " + e.err.Error() }
func (e *errSend) Unwrap() error { return e.err }

func newSendThenWait(conn net.Conn) *sendThenWait {
	s := &sendThenWait{conn: conn}
	if sc, ok := conn.(syscall.Conn); ok {
		if raw, err := sc.SyscallConn(); err == nil {
			s.raw = raw
			s.onReadable = s.readRaw
		}
	}
	return s
}

// send queues msgs to be written by the next Read. Without a raw
// connection it writes them at once; a failure is then an *errSend too.
func (s *sendThenWait) send(msgs []byte) error {
	if s.raw == nil {
		if _, err := s.conn.Write(msgs); err != nil {
			return &errSend{err}
		}
		return nil
	}
	s.pending = msgs
	return nil
}

func (s *sendThenWait) Read(p []byte) (int, error) {
	if s.pending == nil {
		return s.conn.Read(p)
	}
	s.buf, s.n, s.err = p, 0, nil
	err := s.raw.Read(s.onReadable)
	n, rerr := s.n, s.err
	s.buf, s.err = nil, nil
	if err != nil && rerr == nil {
		rerr = err
	}
	if s.pending != nil {
		// The poller gave up (the connection was closed under it)
		// before the request went out: the peer has none of it.
		s.pending = nil
		rerr = &errSend{rerr}
	}
	return n, rerr
}

// readRaw is called by the poller with the socket: first to write the
// pending request (then it reports not done, so that the poller waits
// for readability), then, once readable, to read into s.buf.
func (s *sendThenWait) readRaw(fd uintptr) bool {
	if s.pending != nil {
		msgs := s.pending
		s.pending = nil
		if err := s.writeAll(int(fd), msgs); err != nil {
			s.err = &errSend{err}
			return true
		}
		return false // the answer cannot be there yet: wait for it
	}
	var n int
	var err error
	for {
		n, err = syscall.Read(int(fd), s.buf)
		if err != syscall.EINTR {
			break
		}
	}
	if err == syscall.EAGAIN {
		return false
	}
	if n < 0 {
		n = 0
	}
	if n == 0 && err == nil && len(s.buf) > 0 {
		err = io.EOF
	}
	s.n, s.err = n, err
	return true
}

// writeAll writes msgs with plain system calls while the socket takes
// them, and through the connection (which can wait) for any rest.
func (s *sendThenWait) writeAll(fd int, msgs []byte) error {
	for len(msgs) > 0 {
		n, err := syscall.Write(fd, msgs)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.EAGAIN:
			_, err = s.conn.Write(msgs)
			return err
		case err != nil:
			return err
		}
		msgs = msgs[n:]
	}
	return nil
}

// isSendError reports whether err is the failure to write a request.
func isSendError(err error) bool {
	var e *errSend
	return errors.As(err, &e)
}
