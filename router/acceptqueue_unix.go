//go:build unix

package router

import (
	"net"
	"os"
	"syscall"
)

// closeListener closes the listening socket and returns the connections
// the kernel had queued on it, which a close resets (libpq does not try
// another host after a reset, as it does on a refused connection): it
// takes them in without waiting, through a duplicate of the socket that it
// closes right after the accept that found the queue empty. A client
// whose handshake completes between those two system calls is reset.
func closeListener(lis net.Listener) []net.Conn {
	sc, ok := lis.(syscall.Conn)
	if !ok {
		lis.Close()
		return nil
	}
	dup := -1
	if rc, err := sc.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) {
			syscall.ForkLock.RLock()
			if d, err := syscall.Dup(int(fd)); err == nil {
				syscall.CloseOnExec(d)
				dup = d
			}
			syscall.ForkLock.RUnlock()
		})
	}
	lis.Close() // the socket stays open, listening, through dup
	if dup < 0 {
		return nil
	}
	// The socket is non-blocking (the net package made it so): accept
	// answers EAGAIN when the queue is empty.
	var fds []int
	for {
		syscall.ForkLock.RLock()
		nfd, _, err := syscall.Accept(dup)
		if err == nil {
			syscall.CloseOnExec(nfd)
		}
		syscall.ForkLock.RUnlock()
		if err == syscall.EINTR || err == syscall.ECONNABORTED {
			continue
		}
		if err != nil {
			break
		}
		fds = append(fds, nfd)
	}
	syscall.Close(dup)
	var conns []net.Conn
	for _, nfd := range fds {
		f := os.NewFile(uintptr(nfd), "")
		c, err := net.FileConn(f)
		f.Close()
		if err == nil {
			conns = append(conns, c)
		}
	}
	return conns
}
