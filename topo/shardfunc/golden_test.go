package shardfunc

import (
	"encoding/hex"
	"fmt"
	"testing"
)

// Golden vectors pin the canonical encodings and hashes: they are a public
// contract (other programs compute the same keys), so a change here is a
// breaking change to every deployed topology.
var goldenKeys = []struct {
	typ   ColumnType
	text  string
	canon string // hex of the canonical encoding
	key   string // xxhash routing key
}{
	{Int8, "42", "000000000000002a", "2e4fe982b68910ac"},                                 // seed 002
	{Int8, "1", "0000000000000001", "f36b4a1a44f78bf3"},                                  // seed 002
	{Int4, "42", "000000000000002a", "2e4fe982b68910ac"},                                 // int4 routes like int8
	{Int2, "-1", "ffffffffffffffff", ""},                                                 // two's complement
	{Text, "account-123", hex.EncodeToString([]byte("account-123")), "8191cca6b6fa5ece"}, // seed 004
	{Varchar, "account-123", hex.EncodeToString([]byte("account-123")), "8191cca6b6fa5ece"},
	{Bpchar, "account-123   ", hex.EncodeToString([]byte("account-123")), "8191cca6b6fa5ece"},
	{UUID, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11", "a0eebc999c0b4ef8bb6d6bb9bd380a11", ""},
	{Bool, "true", "01", ""},
	{Bool, "off", "00", ""},
	{Date, "1970-01-02", "0000000000000001", ""},
	{Date, "2000-01-01", fmt.Sprintf("%016x", 10957), ""},
	{Date, "1969-12-31", "ffffffffffffffff", ""},
	{Timestamp, "1970-01-01 00:00:01.5", fmt.Sprintf("%016x", 1500000), ""},
	{Timestamptz, "1970-01-01 01:00:00+01", "0000000000000000", ""},
	{Numeric, "42.50", hex.EncodeToString([]byte("42.5")), ""},
	{Numeric, "-0.00", hex.EncodeToString([]byte("0")), ""},
	{Bytea, `\x00ff`, "00ff", ""},
}

func TestGoldenKeys(t *testing.T) {
	f := Func{Kind: XXHash}
	for _, g := range goldenKeys {
		canon, err := AppendCanonical(nil, g.typ, TextFormat, []byte(g.text))
		if err != nil {
			t.Errorf("%s %q: %v", g.typ, g.text, err)
			continue
		}
		if got := hex.EncodeToString(canon); got != g.canon {
			t.Errorf("%s %q: canonical %s, want %s", g.typ, g.text, got, g.canon)
		}
		key, err := f.Key(g.typ, TextFormat, []byte(g.text))
		if err != nil {
			t.Errorf("%s %q: %v", g.typ, g.text, err)
			continue
		}
		if key != HashCanonical(canon) {
			t.Errorf("%s %q: Key %016x differs from the hash of the canonical form %016x", g.typ, g.text, key, HashCanonical(canon))
		}
		if g.key != "" && fmt.Sprintf("%016x", key) != g.key {
			t.Errorf("%s %q: key %016x, want %s", g.typ, g.text, key, g.key)
		}
	}
}

func TestModuloAndRange(t *testing.T) {
	mod := Func{Kind: Modulo, Modulus: 4}
	if k, err := mod.KeyInt(42); err != nil || k != 2 {
		t.Errorf("42 mod 4 = %d, %v; want 2", k, err)
	}
	rng := Func{Kind: Range}
	if k, err := rng.KeyInt(42); err != nil || k != 42 {
		t.Errorf("range 42 = %d, %v; want 42", k, err)
	}
	for _, f := range []Func{mod, rng} {
		if _, err := f.KeyInt(-1); err == nil {
			t.Errorf("%s accepted a negative value", f.Kind)
		}
		if err := f.Accepts(Text); err == nil {
			t.Errorf("%s accepted a text column", f.Kind)
		}
		k, err := f.Key(Int4, BinaryFormat, []byte{0, 0, 0, 42})
		if err != nil || k != map[Kind]uint64{Modulo: 2, Range: 42}[f.Kind] {
			t.Errorf("%s binary int4 42 = %d, %v", f.Kind, k, err)
		}
	}
}

func TestParseColumnType(t *testing.T) {
	ok := map[string]ColumnType{
		"bigint": Int8, "INT8": Int8, "integer": Int4, "smallint": Int2,
		"character varying(20)": Varchar, "varchar": Varchar, "char(3)": Bpchar,
		"timestamp with time zone": Timestamptz, "timestamp(3) without time zone": Timestamp,
		"numeric(10,2)": Numeric, "uuid": UUID, "boolean": Bool, "bytea": Bytea, "name": Name,
	}
	for name, want := range ok {
		got, err := ParseColumnType(name)
		if err != nil || got != want {
			t.Errorf("ParseColumnType(%q) = %v, %v; want %v", name, got, err, want)
		}
		if back, ok := TypeForOID(got.OID()); !ok || back != got {
			t.Errorf("OID round trip of %v gave %v", got, back)
		}
	}
	for _, name := range []string{"float8", "double precision", "real", "json", "jsonb", "int8[]", "_int4", "point", ""} {
		if _, err := ParseColumnType(name); err == nil {
			t.Errorf("ParseColumnType(%q) accepted an unsupported type", name)
		}
	}
}
