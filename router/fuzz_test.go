package router

import (
	"bytes"
	"context"
	"crypto/md5"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"testing"
	"time"
)

// FuzzClientMessages feeds arbitrary bytes to every parser of client
// input the router has: startup parameters, Bind's parameter section,
// SCRAM messages and the backend-message walker. None may panic, and a
// Bind that parses must give parameters that lie inside the message.
func FuzzClientMessages(f *testing.F) {
	f.Add([]byte("user\x00postgres\x00database\x00db\x00\x00"))
	f.Add([]byte{0, 1, 0, 1, 0, 2, 0, 0, 0, 2, '4', '2', 0xff, 0xff, 0xff, 0xff, 0, 0})
	f.Add([]byte("n,,n=,r=abc"))
	f.Add([]byte("c=biws,r=abcdef,p=AAAA"))
	f.Add([]byte("SCRAM-SHA-256$4096:c2FsdA==$c3RvcmVk:c2VydmVy"))
	f.Fuzz(func(t *testing.T, b []byte) {
		parseStartupParams(b)
		if p, err := parseBindParams(b); err == nil {
			for n := 1; n <= len(p.values); n++ {
				_, v, ok := p.param(n)
				if !ok {
					t.Fatalf("param %d of %d missing", n, len(p.values))
				}
				if len(v) > len(b) {
					t.Fatalf("param %d longer than the message", n)
				}
			}
		}
		backendMessages(b, func(byte, []byte) error { return nil })
		parseSCRAMVerifier(string(b))
		s := &scramServer{v: mockVerifier([]byte("k"), string(b))}
		if _, err := s.first(string(b)); err == nil {
			s.final(string(b))
		}
		cstring(b, 0)
		if len(b) > 5 {
			decodeDataRow(b)
			parseError(b)
		}
	})
}

// TestSCRAMExchange runs a whole exchange with a known password against
// Postgres's stored form of it.
func TestSCRAMExchange(t *testing.T) {
	// SCRAM-SHA-256 secret of "pencil" with salt "salt-0123" and 4096
	// iterations, computed per RFC 5802 and Postgres's scram_build_secret.
	v, err := parseSCRAMVerifier(testVerifier)
	if err != nil {
		t.Fatal(err)
	}
	for _, pw := range []string{"pencil", "wrong"} {
		s := &scramServer{v: v}
		client := newTestSCRAMClient(pw)
		first, err := s.first(client.first())
		if err != nil {
			t.Fatal(err)
		}
		final, err := client.final(first)
		if err != nil {
			t.Fatal(err)
		}
		sig, err := s.final(final)
		switch {
		case pw == "pencil" && err != nil:
			t.Fatalf("right password refused: %v", err)
		case pw == "pencil" && !client.verify(sig):
			t.Fatal("server signature does not verify")
		case pw != "pencil" && err != errWrongPassword:
			t.Fatalf("wrong password: %v", err)
		}
	}
}

// FuzzPreAuth feeds arbitrary bytes, as a client that has not logged in
// would send them, to the whole admission path (startup packet, SSL and
// cancel requests, host-based rules, SASL or md5 exchange) over an
// in-memory connection. It must end (the input ends, or the
// authentication timeout passes) without a panic, and never read a
// message larger than Postgres's limits allow before authentication.
func FuzzPreAuth(f *testing.F) {
	f.Add(append(startupBytes("user", "postgres", "database", "postgres"), 'p', 0, 0, 0, 25, 'S', 'C', 'R', 'A', 'M', '-', 'S', 'H', 'A', '-', '2', '5', '6', 0, 0, 0, 0, 11, 'n', ',', ',', 'n', '=', ',', 'r', '=', 'a', 'b', 'c'))
	f.Add(append(startupBytes("user", "alice", "database", "postgres"), 'p', 0, 0, 0, 8, 'x', 'y', 0))
	f.Add(startupBytes("user", "nobody", "database", "nowhere", "options", "-c search_path=x"))
	f.Add([]byte{0, 0, 0, 8, 4, 210, 22, 47})                          // SSLRequest
	f.Add([]byte{0, 0, 0, 16, 4, 210, 22, 46, 0, 0, 0, 1, 0, 0, 0, 2}) // CancelRequest
	f.Add([]byte{0, 1, 0, 0, 0, 3, 0, 0})
	f.Add(append(startupBytes("user", "postgres"), 'p', 0x7f, 0xff, 0xff, 0xff))
	rules, err := parseHBA("fuzz", "host all alice 127.0.0.1/32 md5\nhost nowhere all all reject\nhost all all all scram-sha-256\n")
	if err != nil {
		f.Fatal(err)
	}
	cfg := Config{AuthTimeout: time.Second}.withDefaults()
	srv := &Server{cfg: cfg, log: cfg.Logger, conns: map[*clientConn]struct{}{}, roleConns: map[string]int{},
		cancels: map[uint32]*clientConn{}, shards: newShards("secret", nil, false), hba: rules, mockSaltKey: mockSaltKey("secret")}
	md5Secret := "md5" + fmt.Sprintf("%x", md5.Sum([]byte("pwalice")))
	srv.roles = roleCache{ttl: time.Hour, fetch: func(context.Context) (map[string]role, map[string]bool, error) {
		return map[string]role{"postgres": {verifier: testVerifier, canLogin: true, connLimit: -1},
			"alice": {verifier: md5Secret, canLogin: true, connLimit: 1}}, map[string]bool{"postgres": true}, nil
	}}
	f.Fuzz(func(t *testing.T, in []byte) {
		c := newClientConn(srv, &inputConn{Reader: bytes.NewReader(in)})
		c.admission.counted = true
		c.admit(context.Background())
		c.nc.Close()
		srv.mu.Lock()
		srv.uncountConnection(c)
		srv.mu.Unlock()
		if cap(c.rd.buf) > maxAuthMessage+5 {
			t.Fatalf("read a %d-byte message before authentication", cap(c.rd.buf))
		}
	})
}

// startupBytes is a protocol 3.0 startup packet with the given pairs.
func startupBytes(kv ...string) []byte {
	body := binary.BigEndian.AppendUint32(nil, protocol30)
	for _, s := range kv {
		body = append(body, s...)
		body = append(body, 0)
	}
	body = append(body, 0)
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(body)+4)), body...)
}

// inputConn is a client connection that sends its Reader's bytes, then
// ends; what the router writes is dropped.
type inputConn struct {
	io.Reader
}

func (inputConn) Write(b []byte) (int, error)        { return len(b), nil }
func (inputConn) Close() error                       { return nil }
func (inputConn) LocalAddr() net.Addr                { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 6432} }
func (inputConn) RemoteAddr() net.Addr               { return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 40000} }
func (inputConn) SetDeadline(t time.Time) error      { return nil }
func (inputConn) SetReadDeadline(t time.Time) error  { return nil }
func (inputConn) SetWriteDeadline(t time.Time) error { return nil }
