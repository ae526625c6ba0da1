package pgerr

import (
	"errors"
	"fmt"
	"testing"
)

type coded struct{}

func (coded) Error() string    { return "coded" }
func (coded) SQLState() string { return "F0000" }

func TestCode(t *testing.T) {
	cases := []struct {
		err  error
		want string
	}{
		{New(FeatureNotSupported, "no %s", "joins"), "0A000"},
		{fmt.Errorf("wrapped: %w", New(ProtocolViolation, "bad")), "08P01"},
		{fmt.Errorf("wrapped: %w", coded{}), "F0000"},
		{errors.New("plain"), InternalError},
		{nil, InternalError},
	}
	for _, c := range cases {
		if got := Code(c.err); got != c.want {
			t.Errorf("Code(%v) = %s, want %s", c.err, got, c.want)
		}
	}
	// The router asks for the code of every statement's error, nil
	// included: that must not allocate.
	direct := New("42601", "syntax")
	if n := testing.AllocsPerRun(100, func() { Code(nil); Code(direct) }); n != 0 {
		t.Errorf("Code allocates %.0f times for nil and an unwrapped error", n)
	}
	e := &Error{Code: "42P01", Message: "relation does not exist", Detail: "d"}
	if e.Error() != "relation does not exist (d)" {
		t.Errorf("Error() = %q", e.Error())
	}
}
