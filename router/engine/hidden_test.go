package engine

import (
	"strings"
	"testing"
)

// TestAvgAsNumericDiv: avg from the shards' sums and counts has
// numeric_div's scale (select_div_scale: 16 significant digits at least,
// no less than the sum's scale) and rounds half away from zero; no rows
// (count 0) is NULL; NaN and infinities pass through.
func TestAvgAsNumericDiv(t *testing.T) {
	cols := []AggColumn{{Func: Avg, Sum: 1, Count: 2}, {Func: SumNumeric}, {Func: SumCounts}}
	for _, c := range []struct {
		partials []string // "sum,count" of each shard
		want     string
	}{
		{[]string{"1,1", "2,1"}, "1.5000000000000000"},
		{[]string{"1,1", "NULL,0", "2,2", "7,1"}, "2.5000000000000000"},
		{[]string{"1,3"}, "0.33333333333333333333"},
		{[]string{"2,3"}, "0.66666666666666666667"},
		{[]string{"-2,1", "NULL,0", "0,2"}, "-0.66666666666666666667"},
		{[]string{"10,3"}, "3.3333333333333333"},
		{[]string{"100000,3"}, "33333.333333333333"},
		{[]string{"1.50,1"}, "1.50000000000000000000"},
		{[]string{"0.000000000000000000000001234,1", "0.0000000000000000000000000000001,1"}, "0.00000000000000000000000061700005000000000000"},
		{[]string{"-9223372036854775808,1", "-9223372036854775808,1"}, "-9223372036854775808"},
		{[]string{"0.00,2"}, "0.00000000000000000000"},
		{[]string{"NULL,0", "NULL,0"}, "NULL"},
		{[]string{"NaN,1", "5,1"}, "NaN"},
		{[]string{"-Infinity,1", "5,1"}, "-Infinity"},
	} {
		var partials []string
		for _, p := range c.partials {
			partials = append(partials, "NULL,"+p)
		}
		got := collect(t, NewProject(NewAggregate(rows(partials...), cols, true, text), 2))
		if len(got) != 1 || got[0] != c.want {
			t.Errorf("avg of %v = %v, want %s", c.partials, got, c.want)
		}
	}
}

// TestCountDistinctOverShards: each shard grouped by the key and x; the
// first aggregation merges the groups two shards share, the second counts
// and sums the values of x.
func TestCountDistinctOverShards(t *testing.T) {
	// key, count(DISTINCT x), sum(DISTINCT x), count(*), x (hidden).
	// Under a FILTER a shard may count x where another does not (g, 9).
	pre := []AggColumn{{Func: GroupKey}, {Func: Max, Type: Int}, {Func: Any}, {Func: SumCounts}, {Func: GroupKey}}
	final := []AggColumn{{Func: GroupKey}, {Func: SumCounts}, {Func: SumInt8}, {Func: SumCounts}, {Func: Any}}
	a := rows("g,1,5,2,5", "g,1,7,1,7", "h,0,NULL,3,NULL", "g,0,NULL,1,9")
	b := rows("g,1,5,4,5", "h,1,-1,1,-1", "h,0,NULL,1,NULL", "g,1,9,1,9")
	plan := &Plan{PreAggregate: pre, Aggregate: final, Sort: []SortKey{{Column: 1, Type: Int}}, Limit: -1, Hidden: 1, Visible: 4}
	got := strings.Join(collect(t, plan.Build([]Operator{a, b}, text)), " ")
	if want := "h,1,-1,5 g,3,21,9"; got != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// TestOrderNumericAndBytes: numerics order by value (1.0 = 1.00, NaN
// last); text under C by its bytes.
func TestOrderNumericAndBytes(t *testing.T) {
	got := strings.Join(collect(t, NewSort(rows("NaN", "1.00", "-Infinity", "0.5", "1.0", "Infinity", "-2"), []SortKey{{Column: 0, Type: Numeric}}, text)), " ")
	if want := "-Infinity -2 0.5 1.00 1.0 Infinity NaN"; got != want {
		t.Errorf("numerics sorted %s, want %s", got, want)
	}
	got = strings.Join(collect(t, NewMerge([]Operator{rows("Z", "a", "ab"), rows("", "B", "b")}, []SortKey{{Column: 0, Type: Bytes}}, text)), "|")
	if want := "|B|Z|a|ab|b"; got != want {
		t.Errorf("text merged %s, want %s", got, want)
	}
	got = strings.Join(collect(t, NewAggregate(rows("b,b", "a,B", "ab,é"), []AggColumn{{Func: Min, Type: Bytes}, {Func: Max, Type: Bytes}}, true, text)), " ")
	if want := "a,é"; got != want {
		t.Errorf("min, max %s, want %s", got, want)
	}
}

// TestProjectCutsHiddenColumns: the rows the client gets have the
// statement's own columns only.
func TestProjectCutsHiddenColumns(t *testing.T) {
	var n []int
	Drain(NewProject(rows("1,2,3", "4,NULL,NULL"), 2), func(r Row) {
		p, err := ParseDataRow(r.Msg)
		if err != nil {
			t.Fatal(err)
		}
		n = append(n, len(p.Values))
	})
	if len(n) != 2 || n[0] != 1 || n[1] != 1 {
		t.Fatalf("columns per row %v", n)
	}
}
