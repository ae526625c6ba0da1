package router

import (
	"context"
	"time"

	"github.com/tesseradb/tessera/pgerr"
)

// Draining: how a router leaves without costing clients a statement that
// was not in flight (docs/operations.md, "Draining a router").
//
// Drain closes the listening socket, so that new connections are refused
// at TCP and a client or load balancer with another router to try moves
// on at once, and takes the router out of discovery. A connection
// accepted before the socket closed is answered after its startup packet
// as a Postgres that is shutting down answers it (57P03, on which libpq
// and pgx try the next host too). A session is closed with 57P01 at the
// first moment it owes its client nothing: right after the ReadyForQuery
// that ends a statement outside a transaction (in the same write, so a
// client that checks its connection before the next statement, as
// pgxpool does, sees it), or, when it is idle (just logged in, or
// between statements), once it has stayed idle for a whole drain tick. A
// session in a transaction runs on until the transaction ends. When the
// grace period is over, the statements still running are canceled and
// every session is ended with 57P01, as Postgres's fast shutdown does.

var (
	// cannot_connect_now and admin_shutdown, as Postgres says them.
	errShuttingDown  = pgerr.New("57P03", "the database system is shutting down")
	errAdminShutdown = pgerr.New("57P01", "terminating connection due to administrator command")
)

// drainTick is how often Drain looks for idle sessions to close: one idle
// for a whole tick is not about to send a statement.
const drainTick = 100 * time.Millisecond

// Where a connection's goroutine is, as Drain sees it (clientConn.idle).
const (
	connBusy        int32 = iota // handling a message, or between messages of a batch
	connIdle                     // waiting for a statement, outside a transaction
	connIdleSeen                 // idle, and Drain saw it so on its last tick
	connIdleInTx                 // waiting for the next statement of a transaction
	connDrainClosed              // Drain closed it while it waited
)

// Drain stops the router the way a rolling restart needs: new connections
// refused (the listening socket closed; one already accepted is answered
// 57P03), out of discovery, sessions closed between statements, open
// transactions given until grace to end. It returns when every session is
// gone or ctx ends (then the rest are ended with 57P01); Stop then
// finishes the shutdown. Another router may listen on the address as soon
// as Drain has begun.
func (s *Server) Drain(ctx context.Context, grace time.Duration) {
	s.draining.Store(true)
	s.stopAccepting()
	if s.reg != nil {
		// Then discovery: tools and load balancers that follow it stop
		// sending clients here.
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		s.reg.Close(rctx)
		cancel()
	}
	s.log.Info("router draining", "grace", grace.String(), "sessions", s.sessionCount())
	deadline := time.NewTimer(grace)
	defer deadline.Stop()
	tick := time.NewTicker(drainTick)
	defer tick.Stop()
	for {
		if s.sessionCount() == 0 {
			s.log.Info("router drained")
			return
		}
		select {
		case <-tick.C:
			for _, c := range s.sessions() {
				c.closeIfIdle()
			}
		case <-deadline.C:
			s.endSessions()
			return
		case <-ctx.Done():
			s.endSessions()
			return
		}
	}
}

// endSessions ends the sessions left when the grace period is over: those
// waiting are told 57P01 and closed; running statements are canceled, and
// their sessions close with 57P01 once the cancel has answered.
func (s *Server) endSessions() {
	s.graceOver.Store(true)
	conns := s.sessions()
	s.log.Info("router drain grace period over", "sessions", len(conns))
	for _, c := range conns {
		if c.idle.CompareAndSwap(connIdle, connDrainClosed) || c.idle.CompareAndSwap(connIdleSeen, connDrainClosed) ||
			c.idle.CompareAndSwap(connIdleInTx, connDrainClosed) {
			c.closeWith(errAdminShutdown)
			continue
		}
		c.cancelRunning()
	}
}

func (s *Server) sessions() []*clientConn {
	s.mu.Lock()
	defer s.mu.Unlock()
	conns := make([]*clientConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	return conns
}

func (s *Server) sessionCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.conns)
}

// closeIfIdle closes a session that has waited outside a transaction
// since the last tick. Two ticks, not one, so that a client between two
// statements is not closed under the statement it is sending.
func (c *clientConn) closeIfIdle() {
	if c.idle.CompareAndSwap(connIdle, connIdleSeen) {
		return
	}
	if c.idle.CompareAndSwap(connIdleSeen, connDrainClosed) {
		c.closeWith(errAdminShutdown)
	}
}

// closeWith sends a FATAL error to a session whose goroutine is blocked
// reading (so nothing else is being written) and closes it.
func (c *clientConn) closeWith(err error) {
	c.wmu.Lock()
	c.nc.SetWriteDeadline(time.Now().Add(time.Second))
	c.w.Write(appendError(nil, "FATAL", err))
	c.w.Flush()
	c.wmu.Unlock()
	c.nc.Close()
}

// waitForMessage publishes, before the connection blocks reading, whether
// Drain may close it there. It returns the error to end the session with
// instead, when the router is draining and the session owes its client
// nothing: then it goes out with the ReadyForQuery just queued. Not so
// right after the login (loggedIn): a client that has just connected
// is about to send its first statement, which closing the session then
// would fail although it was never in flight (libpq reports the
// connection made at that ReadyForQuery); the session is closed only if
// it stays idle for a whole drain tick, as any idle one.
func (c *clientConn) waitForMessage(atStatementEnd, loggedIn bool) error {
	state := connBusy
	switch {
	case !atStatementEnd || c.copyIn != nil || c.rd.r.Buffered() > 0:
		// Mid-batch, mid-COPY, or the client already sent more: in flight.
	case c.tx.active:
		state = connIdleInTx
		if c.srv.graceOver.Load() {
			return errAdminShutdown
		}
	default:
		state = connIdle
		if c.srv.draining.Load() && !loggedIn {
			return errAdminShutdown
		}
	}
	c.idle.Store(state)
	return nil
}

// messageArrived marks the connection busy again; false: Drain closed it
// while it waited, and the message is not to run.
func (c *clientConn) messageArrived() bool {
	return c.idle.Swap(connBusy) != connDrainClosed
}
