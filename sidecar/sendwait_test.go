package sidecar

import (
	"bytes"
	"io"
	"net"
	"path/filepath"
	"testing"
	"time"
)

// unixPair returns both ends of a unix socket connection.
func unixPair(t *testing.T) (*net.UnixConn, *net.UnixConn) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	l, err := net.Listen("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, _ := l.Accept()
		accepted <- c
	}()
	c, err := net.Dial("unix", path)
	if err != nil {
		t.Fatal(err)
	}
	s := <-accepted
	if s == nil {
		t.Fatal("accept failed")
	}
	t.Cleanup(func() { c.Close(); s.Close() })
	return c.(*net.UnixConn), s.(*net.UnixConn)
}

// echoUpper answers each request read on c with the same bytes upper-cased
// after a delay, so the answer cannot be there when the request is sent.
func echoUpper(c net.Conn, delay time.Duration) {
	buf := make([]byte, 1<<20)
	for {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		time.Sleep(delay)
		if _, err := c.Write(bytes.ToUpper(buf[:n])); err != nil {
			return
		}
	}
}

func TestSendThenWaitSendsAndReadsTheAnswer(t *testing.T) {
	c, s := unixPair(t)
	go echoUpper(s, time.Millisecond)
	sw := newSendThenWait(c)
	if sw.raw == nil {
		t.Fatal("a unix connection should offer its raw socket")
	}
	for _, req := range []string{"select", "one more", "and a third"} {
		if err := sw.send([]byte(req)); err != nil {
			t.Fatal(err)
		}
		got := make([]byte, len(req))
		if _, err := io.ReadFull(sw, got); err != nil {
			t.Fatal(err)
		}
		if want := string(bytes.ToUpper([]byte(req))); string(got) != want {
			t.Fatalf("answer %q, want %q", got, want)
		}
		if sw.pending != nil {
			t.Fatal("the request is still pending after its answer came")
		}
	}
}

// A request larger than the socket takes at once is finished by the
// connection's own (waiting) write while the peer reads it.
func TestSendThenWaitLargeRequest(t *testing.T) {
	c, s := unixPair(t)
	req := bytes.Repeat([]byte("abcdefgh"), 1<<20) // 8 MiB
	go func() {
		got := make([]byte, len(req))
		if _, err := io.ReadFull(s, got); err != nil {
			return
		}
		s.Write([]byte{byte(len(bytes.TrimLeft(got, "abcdefgh")))})
	}()
	sw := newSendThenWait(c)
	if err := sw.send(req); err != nil {
		t.Fatal(err)
	}
	var answer [1]byte
	if _, err := io.ReadFull(sw, answer[:]); err != nil {
		t.Fatal(err)
	}
	if answer[0] != 0 {
		t.Fatalf("the peer got a different request (%d stray bytes)", answer[0])
	}
}

func TestSendThenWaitReportsSendFailure(t *testing.T) {
	c, s := unixPair(t)
	s.Close()
	sw := newSendThenWait(c)
	var err error
	// The first write to a socket whose peer just closed may still be
	// taken; the next fails.
	for i := 0; i < 3 && err == nil; i++ {
		if err = sw.send([]byte("hello")); err == nil {
			_, err = sw.Read(make([]byte, 8))
		}
	}
	if err == nil {
		t.Fatal("no error from a closed peer")
	}
	if !isSendError(err) && err != io.EOF {
		t.Fatalf("error %v is neither a send failure nor end of stream", err)
	}
}

func TestSendThenWaitSeesPeerClose(t *testing.T) {
	c, s := unixPair(t)
	go func() {
		buf := make([]byte, 16)
		s.Read(buf)
		s.Close()
	}()
	sw := newSendThenWait(c)
	if err := sw.send([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	if _, err := sw.Read(make([]byte, 8)); err != io.EOF {
		t.Fatalf("read after the peer closed: %v, want EOF", err)
	}
}

// Without a raw socket (net.Pipe) send writes at once and reads are plain.
func TestSendThenWaitWithoutRawSocket(t *testing.T) {
	c, s := net.Pipe()
	defer c.Close()
	defer s.Close()
	go echoUpper(s, 0)
	sw := newSendThenWait(c)
	if sw.raw != nil {
		t.Fatal("net.Pipe has no raw socket")
	}
	done := make(chan error, 1)
	go func() { done <- sw.send([]byte("pipe")) }()
	got := make([]byte, 4)
	if _, err := io.ReadFull(sw, got); err != nil {
		t.Fatal(err)
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if string(got) != "PIPE" {
		t.Fatalf("answer %q", got)
	}
}

// The round trip allocates nothing: Read's callback is bound once, not a
// closure made per call (the hot path of every batch).
func TestSendThenWaitDoesNotAllocate(t *testing.T) {
	c, s := unixPair(t)
	go func() {
		buf := make([]byte, 64)
		for {
			n, err := s.Read(buf)
			if err != nil {
				return
			}
			if _, err := s.Write(buf[:n]); err != nil {
				return
			}
		}
	}()
	sw := newSendThenWait(c)
	req, got := []byte("ping"), make([]byte, 4)
	roundTrip := func() {
		if err := sw.send(req); err != nil {
			t.Fatal(err)
		}
		if _, err := io.ReadFull(sw, got); err != nil {
			t.Fatal(err)
		}
	}
	roundTrip()
	if allocs := testing.AllocsPerRun(200, roundTrip); allocs != 0 {
		t.Errorf("a send and its answer allocate %.1f times", allocs)
	}
}
