package router

import "testing"

// TestAutoPrepareSetting: tessera.auto_prepare follows the session's SET,
// and otherwise the router's default.
func TestAutoPrepareSetting(t *testing.T) {
	for _, tc := range []struct {
		routerOff bool
		set       string // "" for no SET
		want      bool
		show      string
	}{
		{false, "", true, "on"},
		{true, "", false, "off"},
		{false, "off", false, "off"},
		{true, "on", true, "on"},
		{true, "'true'", true, "on"},
		{false, "0", false, "off"},
		{true, "default", false, "off"},
	} {
		s := sessionSettings{autoPrepDefault: autoPrepDefault(tc.routerOff)}
		if tc.set != "" {
			if err := s.setTessera("tessera.auto_prepare", tc.set); err != nil {
				t.Fatalf("SET %s: %v", tc.set, err)
			}
		}
		show, err := s.showTessera("tessera.auto_prepare")
		if s.autoPrepare() != tc.want || show != tc.show || err != nil {
			t.Errorf("router off %v, SET %q: auto-prepare %v, SHOW %q (%v); want %v, %q",
				tc.routerOff, tc.set, s.autoPrepare(), show, err, tc.want, tc.show)
		}
	}
	var s sessionSettings
	if err := s.setTessera("tessera.auto_prepare", "sometimes"); err == nil {
		t.Error("a bad value was accepted")
	}
}

// TestAutoFallbackCodes: only errors the statement as written would
// report differently send it to run again; a cancel or a timeout never.
func TestAutoFallbackCodes(t *testing.T) {
	for code, want := range map[string]bool{
		"22P02": true,  // invalid text representation (a literal's value)
		"42703": true,  // undefined column (position differs)
		"42883": true,  // undefined function
		"26000": true,  // prepared statement does not exist
		"0A000": true,  // feature not supported
		"57014": false, // canceled, or statement_timeout
		"08006": false, // connection failure
		"40001": false, // serialization failure
		"53300": false, // too many connections
		"":      false,
	} {
		if got := autoFallbackCode(code); got != want {
			t.Errorf("%q: run again %v, want %v", code, got, want)
		}
	}
}

// TestAutoFrontend: the messages an auto-prepared read sends, decoded.
func TestAutoFrontend(t *testing.T) {
	fe := appendBindStart(nil, "tsr_x", 2)
	fe = append(fe, 0, 0, 0, 2, '4', '2', 0, 0, 0, 0)
	fe = appendAutoTail(fe)
	want := "B\x00\x00\x00\x1b\x00tsr_x\x00\x00\x00\x00\x02\x00\x00\x00\x0242\x00\x00\x00\x00\x00\x00" +
		"D\x00\x00\x00\x06P\x00" + "E\x00\x00\x00\x09\x00\x00\x00\x00\x00" + "S\x00\x00\x00\x04"
	if string(fe) != want {
		t.Errorf("frontend\n%q, want\n%q", fe, want)
	}
}
