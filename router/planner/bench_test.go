package planner

import "testing"

// pointLookups are two texts of one shape routed to different shards.
var pointLookups = []Input{
	store("SELECT * FROM customers WHERE customer_id = 42"),
	store("SELECT * FROM customers WHERE customer_id = 1"),
}

// BenchmarkPlanCacheHit plans point lookups whose literal changes from
// call to call (the simple protocol): a scan, a lookup and a copy of the
// cached plan bound to the new text.
func BenchmarkPlanCacheHit(b *testing.B) {
	p, top := New(1024), testTop(b)
	p.Plan(top, 1, testSchema, store("SELECT * FROM customers WHERE customer_id = 7"))
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := p.Plan(top, 1, testSchema, pointLookups[i&1]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkAutoParams is BenchmarkPlanCacheHit plus what auto-prepare
// adds to a simple-protocol lookup: its parameter values, appended to a
// reused buffer.
func BenchmarkAutoParams(b *testing.B) {
	p, top := New(1024), testTop(b)
	p.Plan(top, 1, testSchema, store("SELECT * FROM customers WHERE customer_id = 7"))
	var buf []byte
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		stmts, err := p.Plan(top, 1, testSchema, pointLookups[i&1])
		if err != nil {
			b.Fatal(err)
		}
		var ok bool
		if buf, ok = stmts[0].AppendAutoParams(buf[:0]); !ok {
			b.Fatal("no prepared form")
		}
	}
}

// BenchmarkPlanCacheHitSameText plans the same text again (the extended
// protocol, values in parameters): the cached statements are returned.
func BenchmarkPlanCacheHitSameText(b *testing.B) {
	p, top := New(1024), testTop(b)
	in := store("SELECT * FROM customers WHERE customer_id = $1")
	p.Plan(top, 1, testSchema, in)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.Plan(top, 1, testSchema, in); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkPlanCacheHitParallel is BenchmarkPlanCacheHit from every core
// at once, on one cache entry: the contention case.
func BenchmarkPlanCacheHitParallel(b *testing.B) {
	p, top := New(1024), testTop(b)
	p.Plan(top, 1, testSchema, store("SELECT * FROM customers WHERE customer_id = 7"))
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		for i := 0; pb.Next(); i++ {
			if _, err := p.Plan(top, 1, testSchema, pointLookups[i&1]); err != nil {
				b.Error(err)
				return
			}
		}
	})
}

// BenchmarkPlanMiss parses and plans every time (caching disabled).
func BenchmarkPlanMiss(b *testing.B) {
	p, top := New(0), testTop(b)
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := p.Plan(top, 1, testSchema, pointLookups[i&1]); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkShards routes a planned point lookup by its literal.
func BenchmarkShards(b *testing.B) {
	stmts, err := New(0).Plan(testTop(b), 1, testSchema, pointLookups[0])
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, err := stmts[0].Shards(nil); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkScan is the scanner alone on a point lookup.
func BenchmarkScan(b *testing.B) {
	var sc scan
	b.ReportAllocs()
	for b.Loop() {
		sc.run(pointLookups[0].SQL)
	}
}
