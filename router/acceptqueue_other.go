//go:build !unix

package router

import "net"

// closeListener closes the listening socket; elsewhere than on Unix, the
// connections the kernel had queued may be reset.
func closeListener(lis net.Listener) []net.Conn {
	lis.Close()
	return nil
}
