package engine

import (
	"fmt"
	"testing"
)

// benchRows is n DataRows (k, note of about 110 bytes), keys from keyOf.
func benchRows(n int, keyOf func(i int) int) [][]byte {
	msgs := make([][]byte, n)
	for i := range msgs {
		msgs[i] = encodeDataRow([][]byte{fmt.Appendf(nil, "%d", keyOf(i)), fmt.Appendf(nil, "note-%0105d", keyOf(i))})
	}
	return msgs
}

// BenchmarkMergeRows is the k-way merge of 4 sorted inputs, each row
// parsed from its DataRow as a shard's are: the router's work per merged
// row (ns/op and allocs/op are per row), on one core.
func BenchmarkMergeRows(b *testing.B) {
	const perInput = 1 << 14
	inputs := make([][][]byte, 4)
	for k := range inputs {
		inputs[k] = benchRows(perInput, func(i int) int { return i*4 + k })
	}
	keys := []SortKey{{Column: 0, Type: Int}}
	build := func() *Merge {
		ops := make([]Operator, 4)
		for k := range ops {
			ops[k] = NewSource(inputs[k])
		}
		return NewMerge(ops, keys, text)
	}
	m := build()
	b.ReportAllocs()
	for b.Loop() {
		_, ok, err := m.Next()
		if err != nil {
			b.Fatal(err)
		}
		if !ok {
			b.StopTimer()
			m = build()
			b.StartTimer()
		}
	}
}

// BenchmarkSpill is a GROUP BY then ORDER BY of 100k partial rows (50k
// groups) under a 1 MiB budget, spilling (ns/op per whole query).
func BenchmarkSpill(b *testing.B) {
	msgs := benchRows(100000, func(i int) int { return i % 50000 })
	cols := []AggColumn{{Func: GroupKey}, {Func: GroupKey}}
	for _, budget := range []int64{1 << 20, 1 << 30} {
		b.Run(fmt.Sprintf("budget=%dMiB", budget>>20), func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				mem := NewMemory(budget, nil, NewSpillArea(b.TempDir(), 1<<40))
				p := &Plan{Aggregate: cols, Sort: []SortKey{{Column: 0, Type: Int, Desc: true}}, Limit: -1}
				n := 0
				if err := Drain(p.BuildWithin([]Operator{NewSource(msgs)}, text, mem), func(Row) { n++ }); err != nil || n != 50000 {
					b.Fatal(n, err)
				}
				mem.Close()
			}
		})
	}
}

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
