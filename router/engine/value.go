package engine

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math/big"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgtype"
)

// Type is how the engine reads a column's values. The planner picks it
// from the column's Postgres type and lets through only the types listed
// here, whose encodings the engine reads exactly.
type Type uint8

const (
	// Opaque: values compared for equality by their bytes only (text
	// under a deterministic collation, uuid, date, and the integers and
	// booleans as group keys): never ordered, never computed on.
	Opaque Type = iota
	// Int: int2, int4 or int8; text, or binary by its length.
	Int
	// Bool: text t/f, binary one byte.
	Bool
	// Numeric: numeric, read and written by pgx's pgtype (text or binary).
	Numeric
	// Bytes: text or varchar under the C (or POSIX) collation, which
	// orders by the bytes of the UTF-8 value; the text and binary forms
	// are those bytes.
	Bytes
)

func (t Type) String() string {
	switch t {
	case Int:
		return "int"
	case Bool:
		return "bool"
	case Numeric:
		return "numeric"
	case Bytes:
		return "text (C collation)"
	}
	return "opaque"
}

// Format is a column's wire format: 0 text, 1 binary.
type Format = int16

func readInt(v []byte, format Format) (int64, error) {
	if format != 1 {
		return strconv.ParseInt(string(v), 10, 64)
	}
	switch len(v) {
	case 2:
		return int64(int16(binary.BigEndian.Uint16(v))), nil
	case 4:
		return int64(int32(binary.BigEndian.Uint32(v))), nil
	case 8:
		return int64(binary.BigEndian.Uint64(v)), nil
	}
	return 0, fmt.Errorf("a binary integer of %d bytes", len(v))
}

// writeInt8 encodes an int8 (bigint) value.
func writeInt8(n int64, format Format) []byte {
	if format == 1 {
		return binary.BigEndian.AppendUint64(nil, uint64(n))
	}
	return strconv.AppendInt(nil, n, 10)
}

func readBool(v []byte, format Format) (bool, error) {
	if format == 1 {
		if len(v) != 1 {
			return false, fmt.Errorf("a binary bool of %d bytes", len(v))
		}
		return v[0] != 0, nil
	}
	switch string(v) {
	case "t":
		return true, nil
	case "f":
		return false, nil
	}
	return false, fmt.Errorf("a bool written %q", v)
}

func writeBool(b bool, format Format) []byte {
	switch {
	case format == 1 && b:
		return []byte{1}
	case format == 1:
		return []byte{0}
	case b:
		return []byte("t")
	}
	return []byte("f")
}

var numericCodec = pgtype.NumericCodec{}

// typeMap serves the numeric codec's encoders; it is read-only once made.
var typeMap = pgtype.NewMap()

func readNumeric(v []byte, format Format) (pgtype.Numeric, error) {
	var n pgtype.Numeric
	plan := numericCodec.PlanScan(typeMap, pgtype.NumericOID, format, &n)
	if plan == nil {
		return n, fmt.Errorf("no numeric decoder for format %d", format)
	}
	err := plan.Scan(v, &n)
	return n, err
}

// writeNumeric encodes a numeric as Postgres sends it. The text form is
// pgtype's; the binary one is built from it here, as numeric_send does:
// base-10000 digits without leading or trailing zero digits (pgtype
// keeps trailing ones, which compare equal but are other bytes).
func writeNumeric(n pgtype.Numeric, format Format) ([]byte, error) {
	plan := numericCodec.PlanEncode(typeMap, pgtype.NumericOID, 0, n)
	if plan == nil {
		return nil, fmt.Errorf("no numeric encoder")
	}
	text, err := plan.Encode(n, nil)
	if err != nil || format != 1 {
		return text, err
	}
	return numericSend(string(text))
}

// numericSend is the binary form of a numeric written in text: ndigits,
// weight, sign and display scale (int16 each), then the digits.
func numericSend(text string) ([]byte, error) {
	const pos, neg, nan, pinf, ninf = 0x0000, 0x4000, 0xC000, 0xD000, 0xF000
	special := func(sign uint16) []byte {
		return binary.BigEndian.AppendUint16([]byte{0, 0, 0, 0}, sign)[:6:6]
	}
	switch text {
	case "NaN":
		return append(special(nan), 0, 0), nil
	case "Infinity":
		return append(special(pinf), 0, 0), nil
	case "-Infinity":
		return append(special(ninf), 0, 0), nil
	}
	sign := uint16(pos)
	if strings.HasPrefix(text, "-") {
		sign, text = neg, text[1:]
	}
	intPart, frac, _ := strings.Cut(text, ".")
	if intPart == "" || strings.Trim(intPart+frac, "0123456789") != "" {
		return nil, fmt.Errorf("numeric text %q", text)
	}
	dscale := len(frac)
	intPart = strings.Repeat("0", (4-len(intPart)%4)%4) + intPart
	frac += strings.Repeat("0", (4-len(frac)%4)%4)
	all := intPart + frac
	digits := make([]uint16, 0, len(all)/4)
	for i := 0; i < len(all); i += 4 {
		d, _ := strconv.Atoi(all[i : i+4])
		digits = append(digits, uint16(d))
	}
	weight := len(intPart)/4 - 1
	for len(digits) > 0 && digits[0] == 0 {
		digits, weight = digits[1:], weight-1
	}
	for len(digits) > 0 && digits[len(digits)-1] == 0 {
		digits = digits[:len(digits)-1]
	}
	if len(digits) == 0 {
		weight, sign = 0, pos
	}
	out := binary.BigEndian.AppendUint16(nil, uint16(len(digits)))
	out = binary.BigEndian.AppendUint16(out, uint16(int16(weight)))
	out = binary.BigEndian.AppendUint16(out, sign)
	out = binary.BigEndian.AppendUint16(out, uint16(dscale))
	for _, d := range digits {
		out = binary.BigEndian.AppendUint16(out, d)
	}
	return out, nil
}

// compareValues orders two non-NULL values of one column of type t.
func compareValues(a, b []byte, t Type, format Format) (int, error) {
	switch t {
	case Int:
		x, err := readInt(a, format)
		if err != nil {
			return 0, err
		}
		y, err := readInt(b, format)
		if err != nil {
			return 0, err
		}
		return cmpInt(x, y), nil
	case Bool:
		x, err := readBool(a, format)
		if err != nil {
			return 0, err
		}
		y, err := readBool(b, format)
		if err != nil {
			return 0, err
		}
		return cmpBool(x, y), nil
	case Bytes:
		return bytes.Compare(a, b), nil
	case Numeric:
		x, err := readNumeric(a, format)
		if err != nil {
			return 0, err
		}
		y, err := readNumeric(b, format)
		if err != nil {
			return 0, err
		}
		return cmpNumeric(x, y), nil
	}
	return 0, fmt.Errorf("values of type %s are not ordered by the engine", t)
}

// cmpNumeric orders numerics by value as Postgres does (1.0 = 1.00):
// -Infinity, the finite values, Infinity, then NaN, equal to itself.
func cmpNumeric(x, y pgtype.Numeric) int {
	if c := cmpInt(numericClass(x), numericClass(y)); c != 0 || numericClass(x) != 0 {
		return c
	}
	a, b := new(big.Int).Set(x.Int), new(big.Int).Set(y.Int)
	switch {
	case x.Exp > y.Exp:
		a.Mul(a, pow10(x.Exp-y.Exp))
	case y.Exp > x.Exp:
		b.Mul(b, pow10(y.Exp-x.Exp))
	}
	return a.Cmp(b)
}

// numericClass: -1 for -Infinity, 0 finite, 1 Infinity, 2 NaN.
func numericClass(n pgtype.Numeric) int64 {
	switch {
	case n.NaN:
		return 2
	case n.InfinityModifier == pgtype.Infinity:
		return 1
	case n.InfinityModifier == pgtype.NegativeInfinity:
		return -1
	}
	return 0
}

func cmpInt(x, y int64) int {
	switch {
	case x < y:
		return -1
	case x > y:
		return 1
	}
	return 0
}

func cmpBool(x, y bool) int {
	switch {
	case x == y:
		return 0
	case !x:
		return -1
	}
	return 1
}

// addNumeric adds two finite numerics exactly; the result keeps the
// larger scale of the two, as Postgres's numeric addition does.
func addNumeric(a, b pgtype.Numeric) pgtype.Numeric {
	x, y := new(big.Int).Set(a.Int), new(big.Int).Set(b.Int)
	exp := a.Exp
	switch {
	case a.Exp > b.Exp:
		x.Mul(x, pow10(a.Exp-b.Exp))
		exp = b.Exp
	case b.Exp > a.Exp:
		y.Mul(y, pow10(b.Exp-a.Exp))
	}
	return pgtype.Numeric{Int: x.Add(x, y), Exp: exp, Valid: true}
}

func pow10(n int32) *big.Int {
	return new(big.Int).Exp(big.NewInt(10), big.NewInt(int64(n)), nil)
}
