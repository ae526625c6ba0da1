package engine

import (
	"strings"
	"testing"
)

// TestBuildAnalyzedCountsEachOperator: each operator of the tree counts
// the rows it returned, and the stats come in Describe's order, named as
// it names them.
func TestBuildAnalyzedCountsEachOperator(t *testing.T) {
	p := &Plan{
		Merge:     []SortKey{{Column: 0, Type: Int}},
		Aggregate: []AggColumn{{Func: GroupKey}, {Func: SumCounts}},
		Sort:      []SortKey{{Column: 1, Type: Int, Desc: true}},
		Offset:    0, Limit: 2,
	}
	a := rows("1,2", "2,1", "3,5")
	b := rows("1,1", "3,1", "4,7")
	op, stats := p.BuildAnalyzed([]Operator{a, b}, text, nil)
	if got := strings.Join(collect(t, op), " "); got != "4,7 3,6" {
		t.Fatalf("rows %s", got)
	}
	described := p.Describe(nil)
	if len(stats) != len(described) {
		t.Fatalf("%d stats for %d operators: %v", len(stats), len(described), described)
	}
	// Limit, Sort (asked for 2 rows only), Aggregate, Merge.
	want := []int64{2, 2, 4, 6}
	for i, st := range stats {
		if st.Name != strings.TrimSpace(described[i]) || st.Rows != want[i] || st.Time <= 0 {
			t.Errorf("operator %d: %+v, want %q with %d rows and some time", i, st, strings.TrimSpace(described[i]), want[i])
		}
	}
}
