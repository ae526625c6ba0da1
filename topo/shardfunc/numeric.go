package shardfunc

import (
	"encoding/binary"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
)

// maxNumericDigits bounds the decimal digits a numeric shard key may have,
// before and after the point, so that a hostile exponent cannot make the
// canonical form huge. Postgres allows more; such keys are refused.
const maxNumericDigits = 1000

// appendNumericText canonicalises numeric's text input: whitespace, sign,
// digits with an optional point, an optional exponent, or NaN / Infinity.
func appendNumericText(dst []byte, raw []byte) ([]byte, error) {
	s := trimSpace(raw)
	switch strings.ToLower(string(s)) {
	case "nan":
		return append(dst, "NaN"...), nil
	case "infinity", "+infinity", "inf", "+inf":
		return append(dst, "Infinity"...), nil
	case "-infinity", "-inf":
		return append(dst, "-Infinity"...), nil
	}
	bad := func() ([]byte, error) {
		return dst, pgerr.New(pgerr.InvalidTextRepresentation, "invalid input syntax for type numeric: %q", string(raw))
	}
	neg := false
	if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
		neg = s[0] == '-'
		s = s[1:]
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	intPart, s := s[:i], s[i:]
	var fracPart []byte
	if len(s) > 0 && s[0] == '.' {
		s = s[1:]
		i = 0
		for i < len(s) && s[i] >= '0' && s[i] <= '9' {
			i++
		}
		fracPart, s = s[:i], s[i:]
	}
	if len(intPart)+len(fracPart) == 0 {
		return bad()
	}
	exp := int64(0)
	if len(s) > 0 && (s[0] == 'e' || s[0] == 'E') {
		s = s[1:]
		eneg := false
		if len(s) > 0 && (s[0] == '+' || s[0] == '-') {
			eneg = s[0] == '-'
			s = s[1:]
		}
		if len(s) == 0 {
			return bad()
		}
		for len(s) > 0 && s[0] >= '0' && s[0] <= '9' {
			exp = exp*10 + int64(s[0]-'0')
			if exp > maxNumericDigits {
				return dst, pgerr.New(pgerr.NumericValueOutOfRange, "numeric shard-key value %q has too large an exponent", string(raw))
			}
			s = s[1:]
		}
		if eneg {
			exp = -exp
		}
	}
	if len(s) != 0 {
		return bad()
	}
	return appendDecimal(dst, neg, intPart, fracPart, exp)
}

// appendNumericBinary canonicalises numeric's binary form: ndigits, weight,
// sign, dscale (int16 each) and ndigits base-10000 digits.
func appendNumericBinary(dst []byte, raw []byte) ([]byte, error) {
	bad := func() ([]byte, error) {
		return dst, pgerr.New(pgerr.InvalidBinaryRepresention, "invalid binary data format for numeric")
	}
	if len(raw) < 8 {
		return bad()
	}
	ndigits := int(int16(binary.BigEndian.Uint16(raw[0:])))
	weight := int(int16(binary.BigEndian.Uint16(raw[2:])))
	sign := binary.BigEndian.Uint16(raw[4:])
	if ndigits < 0 || len(raw) != 8+2*ndigits {
		return bad()
	}
	switch sign {
	case 0xC000:
		return append(dst, "NaN"...), nil
	case 0xD000:
		return append(dst, "Infinity"...), nil
	case 0xF000:
		return append(dst, "-Infinity"...), nil
	case 0x0000, 0x4000:
	default:
		return bad()
	}
	// Lay the base-10000 digits out as decimal digits d[0..] with the
	// point after position 4*(weight+1), then let appendDecimal normalise.
	var buf [MaxCanonicalStack]byte
	digitsText := buf[:0]
	for i := 0; i < ndigits; i++ {
		d := binary.BigEndian.Uint16(raw[8+2*i:])
		if d > 9999 {
			return bad()
		}
		digitsText = append(digitsText, byte('0'+d/1000), byte('0'+d/100%10), byte('0'+d/10%10), byte('0'+d%10))
	}
	exp := int64(4 * (weight + 1 - ndigits))
	return appendDecimal(dst, sign == 0x4000, digitsText, nil, exp)
}

// appendDecimal writes sign, intPart.fracPart × 10^exp in canonical form.
func appendDecimal(dst []byte, neg bool, intPart, fracPart []byte, exp int64) ([]byte, error) {
	// All digits as one run with the point at position pointAt.
	total := len(intPart) + len(fracPart)
	digitAt := func(i int) byte {
		if i < len(intPart) {
			return intPart[i]
		}
		return fracPart[i-len(intPart)]
	}
	first, last := 0, total-1
	for first < total && digitAt(first) == '0' {
		first++
	}
	if first == total {
		return append(dst, '0'), nil
	}
	for digitAt(last) == '0' {
		last--
	}
	pointAt := int64(len(intPart)) + exp // digits before the point
	intDigits := pointAt - int64(first)
	fracDigits := int64(last+1) - pointAt
	if intDigits > maxNumericDigits || fracDigits > maxNumericDigits {
		return dst, pgerr.New(pgerr.NumericValueOutOfRange, "numeric shard-key value has more than %d digits", maxNumericDigits)
	}
	if neg {
		dst = append(dst, '-')
	}
	if intDigits <= 0 {
		dst = append(dst, '0')
	} else {
		for i := int64(first); i < pointAt; i++ {
			if i <= int64(last) {
				dst = append(dst, digitAt(int(i)))
			} else {
				dst = append(dst, '0')
			}
		}
	}
	if fracDigits > 0 {
		dst = append(dst, '.')
		start := pointAt
		if start < int64(first) {
			for i := start; i < int64(first); i++ {
				dst = append(dst, '0')
			}
			start = int64(first)
		}
		for i := start; i <= int64(last); i++ {
			dst = append(dst, digitAt(int(i)))
		}
	}
	return dst, nil
}
