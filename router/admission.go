package router

import (
	"context"
	"errors"
	"net"
	"time"

	"github.com/tesseradb/tessera/pgerr"
)

// Admission: what stands between a new connection and a session, in
// Postgres's order. The whole of it runs under the authentication
// timeout (Postgres's authentication_timeout) and with messages bounded
// to maxAuthMessage; then the connection limit (max_connections), the
// host-based rules (pg_hba.conf), the password, the role's limit
// (rolconnlimit).

// admission is what a connection counts for against the limits.
type admission struct {
	// counted: the connection counts against MaxConnections; a
	// connection that does not is refused after its startup packet.
	counted bool
	// role is the role it counts for once logged in ("" until then).
	role string
	// method is how it authenticates, by the host-based rules (hba.go).
	method hbaMethod
}

// admit takes a new connection from its first byte to AuthenticationOk.
// False: the connection is to be closed; the client has been told why
// where Postgres would tell it.
func (c *clientConn) admit(ctx context.Context) bool {
	deadline := time.Now().Add(c.srv.cfg.AuthTimeout)
	c.nc.SetDeadline(deadline)
	ctx, cancel := context.WithDeadline(ctx, deadline)
	defer cancel()
	err := c.startup()
	if err == nil && !c.admission.counted {
		// Postgres reads the startup packet first too, so that the client
		// (perhaps after SSL) can read the error.
		err = errTooManyClients
	}
	if err == nil && c.srv.draining.Load() {
		c.srv.metrics.refused.Inc()
		err = errShuttingDown
	}
	if err == nil {
		c.admission.method, err = c.checkHBA()
	}
	if err == nil {
		err = c.authenticate(ctx)
	}
	if err != nil {
		switch {
		case err == errCancelHandled || isDisconnect(err):
		case isTimeout(err) || ctx.Err() != nil:
			// As Postgres: logged, and the connection closed without a
			// word to a client that may not even speak the protocol.
			c.srv.log.Info("canceling authentication due to timeout", "client", c.nc.RemoteAddr().String())
		default:
			c.fatal(err)
		}
		return false
	}
	c.rd.max, c.rd.preAuth = c.srv.cfg.MaxMessageSize, false
	c.nc.SetDeadline(time.Time{})
	return true
}

var errTooManyClients = pgerr.New("53300", "sorry, too many clients already")

// countConnection counts a new connection against MaxConnections if
// there is room. s.mu must be held.
func (s *Server) countConnection(c *clientConn) {
	if s.counted < s.cfg.MaxConnections {
		s.counted++
		c.admission.counted = true
	}
}

// uncountConnection gives back what a closed connection counted for.
// s.mu must be held.
func (s *Server) uncountConnection(c *clientConn) {
	if c.admission.counted {
		s.counted--
	}
	if c.admission.role != "" {
		if s.roleConns[c.admission.role]--; s.roleConns[c.admission.role] <= 0 {
			delete(s.roleConns, c.admission.role)
		}
	}
}

// countRole counts a logged-in connection for its role, refusing it as
// Postgres does when that makes more than the role's rolconnlimit
// (superusers have none). Every connection of the role counts, whatever
// the limit when it logged in, so that ALTER ROLE ... CONNECTION LIMIT
// applies to those already in. Counted per router.
func (s *Server) countRole(c *clientConn, name string, r role) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.connLimit >= 0 && !r.superuser && s.roleConns[name]+1 > r.connLimit {
		return pgerr.New("53300", "too many connections for role %q", name)
	}
	s.roleConns[name]++
	c.admission.role = name
	return nil
}

// refuseAtOnce answers a connection beyond twice MaxConnections without
// reading from it, so that a flood of connections costs no goroutines.
func refuseAtOnce(nc net.Conn) {
	nc.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
	nc.Write(appendError(nil, "FATAL", errTooManyClients))
	nc.Close()
}

// isTimeout reports a deadline that expired on the connection.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
