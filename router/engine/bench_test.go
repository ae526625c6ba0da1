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
