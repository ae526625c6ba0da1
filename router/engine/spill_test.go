package engine

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/tesseradb/tessera/pgerr"
)

// intRows makes a Source of n text rows (k, i): k a key from keyOf.
func intRows(n int, keyOf func(i int) int) *Source {
	msgs := make([][]byte, n)
	for i := range msgs {
		msgs[i] = encodeDataRow([][]byte{fmt.Appendf(nil, "%d", keyOf(i)), fmt.Appendf(nil, "%d", i)})
	}
	return NewSource(msgs)
}

// tinyMemory is a budget a few hundred rows pass, spilling to the test's
// directory.
func tinyMemory(t *testing.T, quota int64) (*Memory, *SpillArea) {
	area := NewSpillArea(t.TempDir(), quota)
	return NewMemory(16<<10, NewRouterMemory(1<<30), area), area
}

// TestSortSpillsAndStaysStable: a sort of 50 times its budget, in many
// runs merged in passes (more runs than maxRuns), answers as the sort
// in memory does, ties in input order; its files are gone after Close.
func TestSortSpillsAndStaysStable(t *testing.T) {
	const n = 20000
	r := rand.New(rand.NewPCG(1, 2))
	keys := make([]int, n)
	for i := range keys {
		keys[i] = r.IntN(500) // many ties
	}
	sortKeys := []SortKey{{Column: 0, Type: Int}}
	want := collect(t, NewSort(intRows(n, func(i int) int { return keys[i] }), sortKeys, text))

	mem, area := tinyMemory(t, 1<<30)
	s := NewSort(intRows(n, func(i int) int { return keys[i] }), sortKeys, text)
	s.mem = mem
	got := collect(t, s)
	if !slices.Equal(got, want) {
		t.Fatalf("the spilled sort differs from the sort in memory")
	}
	if mem.SpilledBytes() == 0 || area.Used() == 0 {
		t.Fatalf("nothing spilled (spilled %d, in use %d)", mem.SpilledBytes(), area.Used())
	}
	if peak := mem.Peak(); peak > 16<<10+1<<10 {
		t.Fatalf("held %d bytes, over the budget", peak)
	}
	mem.Close()
	if area.Used() != 0 {
		t.Fatalf("%d bytes of spill files left after Close", area.Used())
	}
}

// TestAggregateSpillsByPartition: a GROUP BY of many more groups than
// the budget holds answers the same groups and sums as in memory.
func TestAggregateSpillsByPartition(t *testing.T) {
	const n = 30000
	cols := []AggColumn{{Func: GroupKey}, {Func: SumInt8}}
	key := func(i int) int { return (i * 7919) % 5000 }
	want := collect(t, NewAggregate(intRows(n, key), cols, false, text))
	mem, area := tinyMemory(t, 1<<30)
	a := NewAggregate(intRows(n, key), cols, false, text)
	a.mem = mem
	got := collect(t, a)
	if len(got) != 5000 {
		t.Fatalf("%d groups, want 5000", len(got))
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Fatalf("the spilled aggregation differs from the one in memory")
	}
	if mem.SpilledBytes() == 0 {
		t.Fatal("nothing spilled")
	}
	mem.Close()
	if area.Used() != 0 {
		t.Fatalf("%d bytes of spill files left", area.Used())
	}
}

// TestSpillQuotaIs53100: past the spill quota a sort fails with
// disk_full, and what it wrote is freed.
func TestSpillQuotaIs53100(t *testing.T) {
	mem, area := tinyMemory(t, 64<<10)
	s := NewSort(intRows(20000, func(i int) int { return -i }), []SortKey{{Column: 0, Type: Int}}, text)
	s.mem = mem
	_, _, err := s.Next()
	if pgerr.Code(err) != "53100" || !strings.Contains(err.Error(), "quota") {
		t.Fatalf("got %v, want 53100", err)
	}
	mem.Close()
	if area.Used() != 0 {
		t.Fatalf("%d bytes left", area.Used())
	}
}

// TestNoSpillAreaIs53200: a budget without a spill area runs out of
// memory as Postgres says it.
func TestNoSpillAreaIs53200(t *testing.T) {
	s := NewSort(intRows(20000, func(i int) int { return -i }), []SortKey{{Column: 0, Type: Int}}, text)
	s.mem = NewMemory(16<<10, nil, nil)
	if _, _, err := s.Next(); pgerr.Code(err) != "53200" {
		t.Fatalf("got %v, want 53200", err)
	}
}

// TestRouterBudgetIsShared: a query under its own budget still spills
// when the router's is taken by others.
func TestRouterBudgetIsShared(t *testing.T) {
	router := NewRouterMemory(64 << 10)
	other := NewMemory(1<<20, router, nil)
	other.force(60 << 10)
	mem := NewMemory(1<<20, router, NewSpillArea(t.TempDir(), 1<<30))
	s := NewSort(intRows(5000, func(i int) int { return -i }), []SortKey{{Column: 0, Type: Int}}, text)
	s.mem = mem
	if got := collect(t, s); len(got) != 5000 || got[0] != "-4999,4999" {
		t.Fatalf("got %d rows, first %v", len(got), got[:1])
	}
	if mem.SpilledBytes() == 0 {
		t.Fatal("the router's budget did not make the sort spill")
	}
	mem.Close()
	other.Close()
	if router.Used() != 0 {
		t.Fatalf("the router still accounts %d bytes", router.Used())
	}
}
