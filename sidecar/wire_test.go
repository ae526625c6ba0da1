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
