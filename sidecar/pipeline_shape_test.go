package sidecar

import (
	"bytes"
	"testing"
)

func msg(typ byte, body string) []byte {
	n := len(body) + 4
	return append([]byte{typ, byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}, body...)
}

// TestPipelinableShapes: only one statement's batch, ending in its only
// Sync or being one Query, may share a connection; the answers'
// alignment depends on it whatever the router says.
func TestPipelinableShapes(t *testing.T) {
	q, s := msg('Q', "SELECT 1\x00"), msg('S', "")
	bind, exec := msg('B', "\x00s\x00\x00\x00\x00\x00\x00\x00"), msg('E', "\x00\x00\x00\x00\x00")
	cat := func(parts ...[]byte) []byte { return bytes.Join(parts, nil) }
	for name, c := range map[string]struct {
		frontend []byte
		want     bool
	}{
		"query":                  {q, true},
		"bind execute sync":      {cat(bind, exec, s), true},
		"parse describe":         {cat(msg('P', "\x00SELECT 1\x00\x00\x00"), msg('D', "S\x00"), bind, exec, s), true},
		"two queries":            {cat(q, q), false},
		"two syncs":              {cat(bind, exec, s, bind, exec, s), false},
		"no sync":                {cat(bind, exec), false},
		"copy data":              {cat(bind, exec, msg('d', "x"), s), false},
		"flush":                  {cat(bind, exec, msg('H', ""), s), false},
		"function call":          {cat(msg('F', "\x00\x00\x00\x00"), s), false},
		"bad length":             {[]byte{'Q', 0, 0, 0, 99, 'x'}, false},
		"empty":                  {nil, false},
		"over the size bound":    {msg('Q', string(make([]byte, maxPipelinedBatch))), false},
		"truncated after a sync": {append(cat(bind, exec, s), 'S'), false},
	} {
		if got := pipelinable(c.frontend); got != c.want {
			t.Errorf("%s: pipelinable %v, want %v", name, got, c.want)
		}
	}
}

// FuzzPipelinable: any bytes give an answer, never a panic, and a yes
// only for whole messages of which the last, and only the last, is a
// Sync or a Query.
func FuzzPipelinable(f *testing.F) {
	f.Add(msg('Q', "SELECT 1\x00"))
	f.Add(append(msg('B', "\x00s\x00\x00\x00\x00\x00\x00\x00"), msg('S', "")...))
	f.Fuzz(func(t *testing.T, b []byte) {
		if !pipelinable(b) {
			return
		}
		var types []byte
		for rest := b; len(rest) > 0; {
			if len(rest) < 5 {
				t.Fatalf("pipelinable %q: ends inside a header", b)
			}
			n := int(rest[1])<<24 | int(rest[2])<<16 | int(rest[3])<<8 | int(rest[4])
			if n < 4 || n+1 > len(rest) {
				t.Fatalf("pipelinable %q: a message overruns", b)
			}
			types, rest = append(types, rest[0]), rest[n+1:]
		}
		for i, typ := range types {
			if end := typ == 'S' || typ == 'Q'; end != (i == len(types)-1) {
				t.Fatalf("pipelinable %q: message types %q", b, types)
			}
		}
	})
}
