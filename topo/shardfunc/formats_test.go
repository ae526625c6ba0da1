package shardfunc

import (
	"bytes"
	"math/big"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgtype"
)

// binaryOf encodes v in Postgres binary format with pgx, an independent
// implementation of the wire formats.
func binaryOf(t *testing.T, oid uint32, v any) []byte {
	t.Helper()
	b, err := pgtype.NewMap().Encode(oid, pgtype.BinaryFormatCode, v, nil)
	if err != nil {
		t.Fatalf("pgx encode %T: %v", v, err)
	}
	return b
}

func numericOf(t *testing.T, digits string, exp int32) pgtype.Numeric {
	n, ok := new(big.Int).SetString(digits, 10)
	if !ok {
		t.Fatalf("bad digits %q", digits)
	}
	return pgtype.Numeric{Int: n, Exp: exp, Valid: true}
}

// TestTextAndBinaryAgree checks that every supported type gives the same
// canonical bytes whether the value arrives in text or binary format, and
// that text spellings Postgres treats as equal agree too.
func TestTextAndBinaryAgree(t *testing.T) {
	ts := time.Date(2024, 2, 29, 13, 45, 6, 789012000, time.UTC)
	cases := []struct {
		typ    ColumnType
		texts  []string
		binary []byte
	}{
		{Int2, []string{"42", " +42 ", "042"}, []byte{0, 42}},
		{Int4, []string{"-2147483648"}, binaryOf(t, pgtype.Int4OID, int32(-2147483648))},
		{Int8, []string{"9223372036854775807"}, binaryOf(t, pgtype.Int8OID, int64(9223372036854775807))},
		{Int8, []string{"-9223372036854775808"}, binaryOf(t, pgtype.Int8OID, int64(-9223372036854775808))},
		{Text, []string{"héllo"}, []byte("héllo")},
		{Bpchar, []string{"ab  ", "ab"}, []byte("ab ")},
		{Bytea, []string{`\x00FF3130`, `\x00 ff 31 30`, `\000\37710`}, []byte{0, 0xff, '1', '0'}},
		{UUID, []string{"A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11", "{a0eebc99-9c0b4ef8-bb6d6bb9-bd380a11}", "a0eebc999c0b4ef8bb6d6bb9bd380a11", "a0ee-bc99-9c0b-4ef8-bb6d-6bb9-bd38-0a11"},
			binaryOf(t, pgtype.UUIDOID, [16]byte{0xa0, 0xee, 0xbc, 0x99, 0x9c, 0x0b, 0x4e, 0xf8, 0xbb, 0x6d, 0x6b, 0xb9, 0xbd, 0x38, 0x0a, 0x11})},
		{Bool, []string{"t", "TRUE", "yes", "on", "1", " y "}, []byte{1}},
		{Bool, []string{"f", "false", "no", "off", "0"}, []byte{0}},
		{Date, []string{"2024-02-29", " 2024-02-29 "}, binaryOf(t, pgtype.DateOID, time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC))},
		{Date, []string{"1900-03-01"}, binaryOf(t, pgtype.DateOID, time.Date(1900, 3, 1, 0, 0, 0, 0, time.UTC))},
		{Date, []string{"infinity"}, binaryOf(t, pgtype.DateOID, pgtype.Date{InfinityModifier: pgtype.Infinity, Valid: true})},
		{Timestamp, []string{"2024-02-29 13:45:06.789012", "2024-02-29T13:45:06.789012", "2024-02-29 13:45:06.789012+05"},
			binaryOf(t, pgtype.TimestampOID, ts)},
		{Timestamp, []string{"2024-02-29", "2024-02-28 24:00:00"}, binaryOf(t, pgtype.TimestampOID, time.Date(2024, 2, 29, 0, 0, 0, 0, time.UTC))},
		{Timestamptz, []string{"2024-02-29 13:45:06.789012Z", "2024-02-29 15:45:06.789012+02", "2024-02-29 11:15:06.789012-02:30", "2024-02-29 13:45:06.789012 UTC"},
			binaryOf(t, pgtype.TimestamptzOID, ts)},
		{Numeric, []string{"42", "42.000", "+042", "4.2e1", "4200E-2"}, binaryOf(t, pgtype.NumericOID, numericOf(t, "42", 0))},
		{Numeric, []string{"-0.0012345", "-1.2345e-3"}, binaryOf(t, pgtype.NumericOID, numericOf(t, "-12345", -7))},
		{Numeric, []string{"123456789012345678901234567890.5"}, binaryOf(t, pgtype.NumericOID, numericOf(t, "1234567890123456789012345678905", -1))},
		{Numeric, []string{"10000", "1e4"}, binaryOf(t, pgtype.NumericOID, numericOf(t, "1", 4))},
		{Numeric, []string{"0", "-0", "0.000"}, binaryOf(t, pgtype.NumericOID, numericOf(t, "0", 0))},
		{Numeric, []string{"NaN", "nan"}, binaryOf(t, pgtype.NumericOID, pgtype.Numeric{NaN: true, Valid: true})},
		{Numeric, []string{"-Infinity", "-inf"}, binaryOf(t, pgtype.NumericOID, pgtype.Numeric{InfinityModifier: pgtype.NegativeInfinity, Valid: true})},
	}
	for _, c := range cases {
		want, err := AppendCanonical(nil, c.typ, BinaryFormat, c.binary)
		if err != nil {
			t.Errorf("%s binary %x: %v", c.typ, c.binary, err)
			continue
		}
		for _, text := range c.texts {
			got, err := AppendCanonical(nil, c.typ, TextFormat, []byte(text))
			if err != nil {
				t.Errorf("%s %q: %v", c.typ, text, err)
				continue
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s %q: canonical %x (%q), binary gives %x (%q)", c.typ, text, got, got, want, want)
			}
		}
	}
}

func TestRejectsBadInput(t *testing.T) {
	cases := []struct {
		typ    ColumnType
		format Format
		raw    string
		code   string
	}{
		{Int2, TextFormat, "32768", "22003"},
		{Int8, TextFormat, "9223372036854775808", "22003"},
		{Int8, TextFormat, "", "22P02"},
		{Int8, TextFormat, "1.5", "22P02"},
		{Int4, BinaryFormat, "\x00\x00\x2a", "22P03"},
		{UUID, TextFormat, "a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a1", "22P02"},
		{UUID, TextFormat, "-a0eebc999c0b4ef8bb6d6bb9bd380a11", "22P02"},
		{UUID, TextFormat, "{a0eebc999c0b4ef8bb6d6bb9bd380a11", "22P02"},
		{Bool, TextFormat, "o", "22P02"},
		{Bool, TextFormat, "maybe", "22P02"},
		{Date, TextFormat, "2023-02-29", "22007"},
		{Date, TextFormat, "01/02/2024", "22007"},
		{Date, TextFormat, "today", "22007"},
		{Timestamptz, TextFormat, "2024-01-01 00:00:00", "22007"},
		{Timestamptz, TextFormat, "2024-01-01 00:00:00 Europe/Paris", "22007"},
		{Timestamp, TextFormat, "2024-01-01 00:00:00.1234567", "22007"},
		{Timestamp, TextFormat, "2024-01-01 24:00:01", "22007"},
		{Numeric, TextFormat, "1e", "22P02"},
		{Numeric, TextFormat, ".", "22P02"},
		{Numeric, TextFormat, "1e100000", "22003"},
		{Numeric, BinaryFormat, "\x00\x01\x00\x00\x00\x00\x00\x00", "22P03"},
		{Bytea, TextFormat, `\x0`, "22023"},
		{Bytea, TextFormat, `\9`, "22P02"},
	}
	for _, c := range cases {
		_, err := AppendCanonical(nil, c.typ, c.format, []byte(c.raw))
		if err == nil {
			t.Errorf("%s %q accepted", c.typ, c.raw)
			continue
		}
		if code := sqlstate(err); code != c.code {
			t.Errorf("%s %q: SQLSTATE %s (%v), want %s", c.typ, c.raw, code, err, c.code)
		}
	}
}
