package router

import (
	"context"
	"errors"
	"net"
)

// admit takes a new connection from its first byte to AuthenticationOk:
// the startup packet, the password exchange and the checks Postgres makes
// on the way. Until it is done a message may not exceed maxAuthMessage.
// False: the connection is to be closed; the client has been told why
// where Postgres would tell it.
func (c *clientConn) admit(ctx context.Context) bool {
	err := c.startup()
	if err == nil {
		err = c.authenticate(ctx)
	}
	if err != nil {
		if err != errCancelHandled && !isDisconnect(err) {
			c.fatal(err)
		}
		return false
	}
	c.rd.max, c.rd.preAuth = c.srv.cfg.MaxMessageSize, false
	return true
}

// isTimeout reports a deadline that expired on the connection.
func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
