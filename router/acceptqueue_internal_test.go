package router

import (
	"errors"
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// TestCloseListenerKeepsQueued: the connections the kernel had queued on
// a listening socket, never accepted, are returned by closeListener and
// work; connections after it are refused.
func TestCloseListenerKeepsQueued(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	const n = 16
	var clients []net.Conn
	for range n {
		c, err := net.Dial("tcp", lis.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		clients = append(clients, c)
	}
	time.Sleep(100 * time.Millisecond) // the handshakes are done
	queued := closeListener(lis)
	if len(queued) != n {
		t.Fatalf("closeListener returned %d connections, want %d", len(queued), n)
	}
	if _, err := net.Dial("tcp", lis.Addr().String()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("a connection after closeListener: %v, want it refused", err)
	}
	// Each answers its own client: the server side writes the port of
	// the client it accepted, which that client reads.
	for _, s := range queued {
		port := byte(s.RemoteAddr().(*net.TCPAddr).Port)
		if _, err := s.Write([]byte{port}); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	for _, c := range clients {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b := make([]byte, 1)
		if _, err := io.ReadFull(c, b); err != nil || b[0] != byte(c.LocalAddr().(*net.TCPAddr).Port) {
			t.Fatalf("a queued connection: read %v, %v", b, err)
		}
	}
}
