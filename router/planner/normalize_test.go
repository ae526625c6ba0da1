package planner

import "testing"

func TestNormalize(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"SELECT * FROM t WHERE id = 42", "SELECT * FROM t WHERE id = $1"},
		{"select  a,\n b from t where x = 'it''s' and y = 1.5 -- c", "select a, b from t where x = $1 and y = $2"},
		{"UPDATE t SET v = $2 WHERE id = $1", "UPDATE t SET v = $2 WHERE id = $1"},
	} {
		if got, ok := Normalize(tc.in); !ok || got != tc.want {
			t.Errorf("Normalize(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	// Two statements that differ only in their literals are one entry.
	a, _ := Normalize("SELECT 1 FROM t WHERE k = 'x'")
	b, _ := Normalize("SELECT 7 FROM t WHERE k = 'yy'")
	if a != b {
		t.Errorf("%q and %q differ", a, b)
	}
	// Text the scanner does not model is not shown: its literals could
	// not be removed.
	if got, ok := Normalize("ALTER ROLE r PASSWORD 'secret"); ok || got != "" {
		t.Errorf("an unterminated literal: %q, %v", got, ok)
	}
}
