package router

import (
	"testing"
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
