package shardfunc

import (
	"bytes"
	"encoding/binary"
	"strconv"
	"testing"
)

var allTypes = []ColumnType{Int2, Int4, Int8, Text, Varchar, Name, Bpchar, Bytea, UUID, Bool, Date, Timestamp, Timestamptz, Numeric}

// FuzzCanonical feeds arbitrary bytes to every decoder in both formats: no
// input may panic, and a numeric's canonical form must be a fixed point
// (canonicalising it again gives the same bytes).
func FuzzCanonical(f *testing.F) {
	for _, s := range []string{"42", "-0.5e3", `\x00ff`, "2024-02-29 13:45:06.789Z", "{a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11}", "yes", "NaN", "\x00\x01\x00\x00\x00\x00\x00\x00\x00\x2a"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		for _, typ := range allTypes {
			for _, format := range []Format{TextFormat, BinaryFormat} {
				canon, err := AppendCanonical(nil, typ, format, raw)
				if err == nil && typ == Numeric {
					again, err := AppendCanonical(nil, Numeric, TextFormat, canon)
					if err != nil || !bytes.Equal(again, canon) {
						t.Fatalf("numeric canonical %q is not a fixed point: %q, %v", canon, again, err)
					}
				}
				_, _ = (Func{Kind: XXHash}).Key(typ, format, raw)
			}
		}
	})
}

// FuzzIntFormatsAgree checks that every int64 routes alike in text and
// binary format and whatever integer type carries it.
func FuzzIntFormatsAgree(f *testing.F) {
	for _, v := range []int64{0, 1, -1, 42, 32767, -32768, 2147483647, -9223372036854775808} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v int64) {
		fn := Func{Kind: XXHash}
		want, _ := fn.KeyInt(v)
		text := []byte(strconv.FormatInt(v, 10))
		bin := binary.BigEndian.AppendUint64(nil, uint64(v))
		for _, c := range []struct {
			typ ColumnType
			f   Format
			raw []byte
			fit bool
		}{
			{Int8, TextFormat, text, true},
			{Int8, BinaryFormat, bin, true},
			{Int4, TextFormat, text, v == int64(int32(v))},
			{Int4, BinaryFormat, bin[4:], v == int64(int32(v))},
			{Int2, TextFormat, text, v == int64(int16(v))},
			{Int2, BinaryFormat, bin[6:], v == int64(int16(v))},
		} {
			if !c.fit {
				continue
			}
			got, err := fn.Key(c.typ, c.f, c.raw)
			if err != nil || got != want {
				t.Fatalf("%d as %s format %d: %016x, %v; want %016x", v, c.typ, c.f, got, err, want)
			}
		}
	})
}
