package planner

import (
	"fmt"
	"testing"
)

// ParamRefs finds each $n where the text has it, in order, and not in
// string literals, quoted identifiers or comments.
func TestParamRefs(t *testing.T) {
	sql := `INSERT INTO "t$1" (a) SELECT $2, '$1', $10 /* $3 */ FROM s WHERE x = $1 AND y = ANY($2::int[]) -- $4`
	refs, ok := ParamRefs(sql)
	if !ok {
		t.Fatalf("ParamRefs(%q) refused", sql)
	}
	var got []string
	for _, r := range refs {
		got = append(got, fmt.Sprintf("%d:%s", r.Number, sql[r.Start:r.End]))
	}
	if want := "[2:$2 10:$10 1:$1 2:$2]"; fmt.Sprint(got) != want {
		t.Fatalf("ParamRefs = %v, want %s", got, want)
	}
	for _, bad := range []string{"SELECT $1; SELECT $2", "SELECT (", "SELECT $01"} {
		if _, ok := ParamRefs(bad); ok {
			t.Errorf("ParamRefs(%q) accepted", bad)
		}
	}
}
