package shardfunc

import (
	"testing"

	"github.com/tesseradb/tessera/pgerr"
)

func sqlstate(err error) string { return pgerr.Code(err) }

// Routing an integer, text or fixed-size value must not allocate: it runs
// for every routed query.
func TestKeyDoesNotAllocate(t *testing.T) {
	f := Func{Kind: XXHash}
	inputs := []struct {
		typ ColumnType
		f   Format
		raw []byte
	}{
		{Int8, TextFormat, []byte("123456789")},
		{Int8, BinaryFormat, []byte{0, 0, 0, 0, 0, 0, 0, 42}},
		{Text, TextFormat, []byte("account-123")},
		{UUID, TextFormat, []byte("a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11")},
		{Timestamptz, TextFormat, []byte("2024-02-29 13:45:06Z")},
		{Numeric, TextFormat, []byte("12345.678")},
	}
	for _, in := range inputs {
		allocs := testing.AllocsPerRun(100, func() {
			if _, err := f.Key(in.typ, in.f, in.raw); err != nil {
				t.Fatal(err)
			}
		})
		if allocs != 0 {
			t.Errorf("Key(%s, %q) allocates %.0f times per call", in.typ, in.raw, allocs)
		}
	}
}

func BenchmarkKeyInt(b *testing.B) {
	f := Func{Kind: XXHash}
	b.ReportAllocs()
	for i := 0; b.Loop(); i++ {
		if _, err := f.KeyInt(int64(i)); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkKeyText(b *testing.B) {
	f := Func{Kind: XXHash}
	raw := []byte("account-123")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.Key(Text, TextFormat, raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkKeyInt8Text(b *testing.B) {
	f := Func{Kind: XXHash}
	raw := []byte("1234567")
	b.ReportAllocs()
	for b.Loop() {
		if _, err := f.Key(Int8, TextFormat, raw); err != nil {
			b.Fatal(err)
		}
	}
}
