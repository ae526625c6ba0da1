package sidecar

import (
	"strings"
	"testing"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
)

func TestDemoteFatal(t *testing.T) {
	for _, severity := range []string{"FATAL", "PANIC", "ERROR"} {
		msg := pgwire.AppendError(nil, severity, pgerr.New("57P01", "terminating connection due to administrator command"))
		size := len(msg)
		demoteFatal(msg)
		if len(msg) != size {
			t.Fatalf("%s: the message changed length", severity)
		}
		if got := string(msg); !strings.Contains(got, "SERROR\x00") || !strings.Contains(got, "VERROR\x00") || strings.Contains(got, "S"+severity+"\x00") && severity != "ERROR" {
			t.Errorf("%s demoted: %q", severity, got)
		}
		if e := pgwire.ParseError(msg); e.Code != "57P01" || e.Message != "terminating connection due to administrator command" {
			t.Errorf("%s: the other fields changed: %+v", severity, e)
		}
	}
	// A message field that merely says FATAL is left alone.
	msg := pgwire.AppendError(nil, "ERROR", pgerr.New("XX000", "FATAL"))
	demoteFatal(msg)
	if e := pgwire.ParseError(msg); e.Message != "FATAL" {
		t.Errorf("the message text was rewritten: %q", e.Message)
	}
	demoteFatal([]byte{'E', 0, 0}) // truncated: no panic
}

// FuzzDemoteFatal: whatever a backend sends, rewriting severities never
// panics, never changes a message's length, and leaves no FATAL severity.
func FuzzDemoteFatal(f *testing.F) {
	f.Add(pgwire.AppendError(nil, "FATAL", pgerr.New("57P01", "terminating connection")))
	f.Add([]byte{'E', 0, 0, 0, 4, 0})
	f.Add([]byte("E\x00\x00\x00\x0eSFATAL\x00VPANIC\x00"))
	f.Fuzz(func(t *testing.T, msg []byte) {
		before := len(msg)
		demoteFatal(msg)
		if len(msg) != before {
			t.Fatalf("length %d became %d", before, len(msg))
		}
		if len(msg) < 5 {
			return
		}
		for b := msg[5:]; len(b) > 1; {
			end := 1
			for end < len(b) && b[end] != 0 {
				end++
			}
			if v := string(b[1:end]); (b[0] == 'S' || b[0] == 'V') && (v == "FATAL" || v == "PANIC") {
				t.Fatalf("severity %q left in %q", v, msg)
			}
			if end >= len(b) {
				break
			}
			b = b[end+1:]
		}
	})
}
