package topo_test

import (
	"testing"

	"github.com/tesseradb/tessera/topo/shardfunc"
)

// Resolving a table and routing an integer key is on every query's path:
// it must not allocate.
func TestResolveAndRouteIntDoNotAllocate(t *testing.T) {
	top := load(t, "extenddb.json")
	store := load(t, "store_xxhash.json")
	allocs := testing.AllocsPerRun(1000, func() {
		p := store.Resolve("store", "public", "customers")
		if _, shard, err := p.RouteInt(42); err != nil || shard != "customer-shard-1" {
			t.Fatal(shard, err)
		}
		if _, _, err := p.Route(shardfunc.Int8, shardfunc.BinaryFormat, []byte{0, 0, 0, 0, 0, 0, 0, 42}); err != nil {
			t.Fatal(err)
		}
		q := top.Resolve("extenddb", "public", "items")
		if _, _, err := q.Route(shardfunc.Text, shardfunc.TextFormat, []byte("account-123")); err != nil {
			t.Fatal(err)
		}
		_ = top.Resolve("nope", "public", "x")
	})
	if allocs != 0 {
		t.Errorf("resolve and route allocate %.1f times per query", allocs)
	}
}

func BenchmarkResolveRouteInt(b *testing.B) {
	top := load(b, "store_xxhash.json")
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		p := top.Resolve("store", "public", "customers")
		if _, _, err := p.RouteInt(int64(i)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkResolveRouteText(b *testing.B) {
	top := load(b, "extenddb.json")
	raw := []byte("account-123")
	b.ReportAllocs()
	for b.Loop() {
		p := top.Resolve("extenddb", "public", "items")
		if _, _, err := p.Route(shardfunc.Text, shardfunc.TextFormat, raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkParse(b *testing.B) {
	doc := []byte(minimal)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := topoParse(doc); err != nil {
			b.Fatal(err)
		}
	}
}
