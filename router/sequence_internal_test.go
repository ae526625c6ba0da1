package router

import (
	"slices"
	"testing"
)

// TestQualifiedName: the text of nextval's argument names a sequence as
// Postgres's regclass input reads it.
func TestQualifiedName(t *testing.T) {
	for _, c := range []struct {
		in   string
		want []string // nil: not a name
	}{
		{"ids_id_seq", []string{"ids_id_seq"}},
		{"IDS_Id_Seq", []string{"ids_id_seq"}},
		{"public.ids_id_seq", []string{"public", "ids_id_seq"}},
		{` "My Schema" . "Seq""1" `, []string{"My Schema", `Seq"1`}},
		{`"a.b"`, []string{"a.b"}},
		{"db.public.s", nil},
		{"", nil},
		{"a..b", nil},
		{`"unterminated`, nil},
		{`"a"b`, nil},
	} {
		got, ok := qualifiedName(c.in)
		if ok != (c.want != nil) || !slices.Equal(got, c.want) {
			t.Errorf("qualifiedName(%q) = %q, %v; want %q", c.in, got, ok, c.want)
		}
	}
}
