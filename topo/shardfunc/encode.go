package shardfunc

import (
	"encoding/binary"
	"math"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
)

// Format is a Postgres wire format code: 0 for text, 1 for binary.
type Format int16

const (
	TextFormat   Format = 0
	BinaryFormat Format = 1
)

// MaxCanonicalStack is a buffer size that holds the canonical encoding of
// every fixed-size type; callers pass a stack buffer of this size to
// AppendCanonical so that routing such values does not allocate.
const MaxCanonicalStack = 64

// AppendCanonical appends the canonical encoding of a value of type t, sent
// in the given wire format, to dst. The same value gives the same bytes in
// either format:
//
//	int2, int4, int8      8-byte big-endian two's-complement int64
//	text, varchar, name   the UTF-8 bytes as sent
//	bpchar                the UTF-8 bytes without trailing blanks
//	bytea                 the raw bytes
//	uuid                  the 16 bytes
//	bool                  one byte, 0x01 for true and 0x00 for false
//	date                  8-byte big-endian int64 days since 1970-01-01
//	timestamp             8-byte big-endian int64 microseconds since 1970-01-01 00:00:00
//	timestamptz           8-byte big-endian int64 microseconds since 1970-01-01 00:00:00 UTC
//	numeric               the shortest decimal text: no leading zeros, no trailing
//	                      fractional zeros, no exponent, "-" only when non-zero
//	                      (42, 42.0 and 4.2e1 all give "42"); "NaN", "Infinity", "-Infinity"
//
// date and timestamp infinities encode as the largest and smallest int64.
func AppendCanonical(dst []byte, t ColumnType, f Format, raw []byte) ([]byte, error) {
	switch t {
	case Int2, Int4, Int8:
		v, err := DecodeInt(t, f, raw)
		if err != nil {
			return dst, err
		}
		return binary.BigEndian.AppendUint64(dst, uint64(v)), nil
	case Text, Varchar, Name:
		return append(dst, raw...), nil
	case Bpchar:
		return append(dst, trimTrailingBlanks(raw)...), nil
	case Bytea:
		if f == BinaryFormat {
			return append(dst, raw...), nil
		}
		return appendByteaText(dst, raw)
	case UUID:
		return appendUUID(dst, f, raw)
	case Bool:
		b, err := decodeBool(f, raw)
		if err != nil {
			return dst, err
		}
		if b {
			return append(dst, 1), nil
		}
		return append(dst, 0), nil
	case Date:
		d, err := decodeDate(f, raw)
		if err != nil {
			return dst, err
		}
		return binary.BigEndian.AppendUint64(dst, uint64(d)), nil
	case Timestamp, Timestamptz:
		us, err := decodeTimestamp(t, f, raw)
		if err != nil {
			return dst, err
		}
		return binary.BigEndian.AppendUint64(dst, uint64(us)), nil
	case Numeric:
		if f == BinaryFormat {
			return appendNumericBinary(dst, raw)
		}
		return appendNumericText(dst, raw)
	}
	return dst, pgerr.New(pgerr.FeatureNotSupported, "type %s cannot be a shard key", t)
}

// DecodeInt decodes an int2, int4 or int8 value in text or binary format.
// It does not allocate unless it fails.
func DecodeInt(t ColumnType, f Format, raw []byte) (int64, error) {
	if !t.IsInteger() {
		return 0, pgerr.New(pgerr.DatatypeMismatch, "type %s is not an integer type", t)
	}
	if f == BinaryFormat {
		switch {
		case t == Int2 && len(raw) == 2:
			return int64(int16(binary.BigEndian.Uint16(raw))), nil
		case t == Int4 && len(raw) == 4:
			return int64(int32(binary.BigEndian.Uint32(raw))), nil
		case t == Int8 && len(raw) == 8:
			return int64(binary.BigEndian.Uint64(raw)), nil
		}
		return 0, pgerr.New(pgerr.InvalidBinaryRepresention, "incorrect binary data format for %s: %d bytes", t, len(raw))
	}
	return parseIntText(t, raw)
}

// parseIntText parses a decimal integer as Postgres's int2in/int4in/int8in
// do: optional surrounding whitespace and one sign.
func parseIntText(t ColumnType, raw []byte) (int64, error) {
	s := trimSpace(raw)
	neg := false
	if len(s) > 0 && (s[0] == '-' || s[0] == '+') {
		neg = s[0] == '-'
		s = s[1:]
	}
	if len(s) == 0 {
		return 0, invalidSyntax(t, raw)
	}
	// Accumulate as a negative number so that the minimum int64 fits.
	var acc int64
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, invalidSyntax(t, raw)
		}
		d := int64(c - '0')
		if acc < (math.MinInt64+d)/10 {
			return 0, outOfRange(t, raw)
		}
		acc = acc*10 - d
	}
	if !neg {
		if acc == math.MinInt64 {
			return 0, outOfRange(t, raw)
		}
		acc = -acc
	}
	switch t {
	case Int2:
		if acc < math.MinInt16 || acc > math.MaxInt16 {
			return 0, outOfRange(t, raw)
		}
	case Int4:
		if acc < math.MinInt32 || acc > math.MaxInt32 {
			return 0, outOfRange(t, raw)
		}
	}
	return acc, nil
}

func invalidSyntax(t ColumnType, raw []byte) error {
	return pgerr.New(pgerr.InvalidTextRepresentation, "invalid input syntax for type %s: %q", t, string(raw))
}

func outOfRange(t ColumnType, raw []byte) error {
	return pgerr.New(pgerr.NumericValueOutOfRange, "value %q is out of range for type %s", string(raw), t)
}

func isSpace(c byte) bool {
	return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'
}

func trimSpace(b []byte) []byte {
	for len(b) > 0 && isSpace(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isSpace(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

func trimTrailingBlanks(b []byte) []byte {
	for len(b) > 0 && b[len(b)-1] == ' ' {
		b = b[:len(b)-1]
	}
	return b
}

func unhex(c byte) (byte, bool) {
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	case c >= 'A' && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

// appendByteaText decodes bytea's text input: the hex format (\x0a0b, with
// whitespace allowed between digit pairs) or the escape format (\\, \ooo and
// literal bytes), as byteain does.
func appendByteaText(dst []byte, raw []byte) ([]byte, error) {
	if len(raw) >= 2 && raw[0] == '\\' && raw[1] == 'x' {
		s := raw[2:]
		for i := 0; i < len(s); {
			if isSpace(s[i]) {
				i++
				continue
			}
			hi, ok1 := unhex(s[i])
			if i+1 >= len(s) {
				return dst, pgerr.New(pgerr.InvalidParameterValue, "invalid hexadecimal data: odd number of digits")
			}
			lo, ok2 := unhex(s[i+1])
			if !ok1 || !ok2 {
				return dst, pgerr.New(pgerr.InvalidParameterValue, "invalid hexadecimal digit in bytea value")
			}
			dst = append(dst, hi<<4|lo)
			i += 2
		}
		return dst, nil
	}
	for i := 0; i < len(raw); {
		c := raw[i]
		if c != '\\' {
			dst = append(dst, c)
			i++
			continue
		}
		if i+1 < len(raw) && raw[i+1] == '\\' {
			dst = append(dst, '\\')
			i += 2
			continue
		}
		if i+3 < len(raw) && isOctal(raw[i+1], '3') && isOctal(raw[i+2], '7') && isOctal(raw[i+3], '7') {
			dst = append(dst, (raw[i+1]-'0')<<6|(raw[i+2]-'0')<<3|(raw[i+3]-'0'))
			i += 4
			continue
		}
		return dst, pgerr.New(pgerr.InvalidTextRepresentation, "invalid input syntax for type bytea")
	}
	return dst, nil
}

func isOctal(c, max byte) bool { return c >= '0' && c <= max }

// appendUUID accepts the forms uuid_in accepts: 32 hex digits in either
// case, optionally in braces, with a hyphen allowed after any group of four.
func appendUUID(dst []byte, f Format, raw []byte) ([]byte, error) {
	if f == BinaryFormat {
		if len(raw) != 16 {
			return dst, pgerr.New(pgerr.InvalidBinaryRepresention, "incorrect binary data format for uuid: %d bytes", len(raw))
		}
		return append(dst, raw...), nil
	}
	s := trimSpace(raw)
	bad := func() ([]byte, error) {
		return dst, pgerr.New(pgerr.InvalidTextRepresentation, "invalid input syntax for type uuid: %q", string(raw))
	}
	if len(s) > 0 && s[0] == '{' {
		if s[len(s)-1] != '}' {
			return bad()
		}
		s = s[1 : len(s)-1]
	}
	var out [16]byte
	n := 0
	for i := 0; i < len(s); i++ {
		if s[i] == '-' {
			if n == 0 || n == 32 || n%4 != 0 || (i > 0 && s[i-1] == '-') {
				return bad()
			}
			continue
		}
		d, ok := unhex(s[i])
		if !ok || n >= 32 {
			return bad()
		}
		out[n/2] |= d << (4 * (1 - n%2))
		n++
	}
	if n != 32 || (len(s) > 0 && s[len(s)-1] == '-') {
		return bad()
	}
	return append(dst, out[:]...), nil
}

// decodeBool accepts what boolin accepts: any unambiguous prefix of true,
// false, yes, no, on, off (case-insensitive), 1 and 0, with whitespace.
func decodeBool(f Format, raw []byte) (bool, error) {
	if f == BinaryFormat {
		if len(raw) != 1 {
			return false, pgerr.New(pgerr.InvalidBinaryRepresention, "incorrect binary data format for bool")
		}
		return raw[0] != 0, nil
	}
	s := strings.ToLower(string(trimSpace(raw)))
	if s != "" {
		switch {
		case strings.HasPrefix("true", s), strings.HasPrefix("yes", s), s == "1", len(s) >= 2 && s == "on":
			return true, nil
		case strings.HasPrefix("false", s), strings.HasPrefix("no", s), s == "0", len(s) >= 2 && strings.HasPrefix("off", s):
			return false, nil
		}
	}
	return false, pgerr.New(pgerr.InvalidTextRepresentation, "invalid input syntax for type boolean: %q", string(raw))
}
