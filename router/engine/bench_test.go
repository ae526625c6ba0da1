package engine

import (
	"fmt"
	"testing"
)

// benchShards is 4 shards' partial rows of a GROUP BY with avg and
// count(DISTINCT x), in text: per shard, groups of 100 keys by 10 values
// of x, each with count, sum(qty) and count(qty).
func benchShards() [][][]byte {
	shards := make([][][]byte, 4)
	for s := range shards {
		for g := range 100 {
			for x := range 10 {
				shards[s] = append(shards[s], encodeDataRow([][]byte{
					[]byte(fmt.Sprint("group-", g)), []byte("1"), []byte("12.5000000000000000"), []byte(fmt.Sprint(3 + s)),
					[]byte(fmt.Sprint(s*7 + x*11 + g)), []byte(fmt.Sprint(3 + s)), []byte(fmt.Sprint(x + s)),
				}))
			}
		}
	}
	return shards
}

// BenchmarkAvgAndCountDistinctByGroup: the router's side of
// SELECT g, count(DISTINCT x), avg(qty), count(*) ... GROUP BY g over 4
// shards (hidden columns: avg's sum and count, x), per partial row.
func BenchmarkAvgAndCountDistinctByGroup(b *testing.B) {
	shards := benchShards()
	plan := &Plan{
		PreAggregate: []AggColumn{{Func: GroupKey}, {Func: Any}, {Func: Any}, {Func: SumCounts}, {Func: SumNumeric}, {Func: SumCounts}, {Func: GroupKey}},
		Aggregate:    []AggColumn{{Func: GroupKey}, {Func: SumCounts}, {Func: Avg, Sum: 4, Count: 5}, {Func: SumCounts}, {Func: SumNumeric}, {Func: SumCounts}, {Func: Any}},
		Limit:        -1, Hidden: 3, Visible: 4,
	}
	rows := 0
	for _, s := range shards {
		rows += len(s)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		inputs := make([]Operator, len(shards))
		for i, s := range shards {
			inputs[i] = NewSource(s)
		}
		n := 0
		if err := Drain(plan.Build(inputs, text), func(Row) { n++ }); err != nil || n != 100 {
			b.Fatalf("%d groups, %v", n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*rows), "ns/row")
}

// BenchmarkMergeHiddenSortKey: the router's side of SELECT name ... ORDER
// BY k LIMIT 1000 over 4 shards, k a hidden column, per merged row.
func BenchmarkMergeHiddenSortKey(b *testing.B) {
	shards := make([][][]byte, 4)
	for s := range shards {
		for i := range 1000 {
			shards[s] = append(shards[s], encodeDataRow([][]byte{[]byte(fmt.Sprint("name-", i)), []byte(fmt.Sprint(i*4 + s))}))
		}
	}
	plan := &Plan{Merge: []SortKey{{Column: 1, Type: Int}}, Limit: 1000, Hidden: 1, Visible: 1}
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		inputs := make([]Operator, len(shards))
		for i, s := range shards {
			inputs[i] = NewSource(s)
		}
		n := 0
		if err := Drain(plan.Build(inputs, text), func(Row) { n++ }); err != nil || n != 1000 {
			b.Fatalf("%d rows, %v", n, err)
		}
	}
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*1000), "ns/row")
}
