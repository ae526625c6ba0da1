package shardfunc

import (
	"encoding/binary"
	"math"

	"github.com/tesseradb/tessera/pgerr"
)

// Postgres's binary date and timestamp formats count from 2000-01-01.
const (
	pgEpochDays   = 10957                     // days from 1970-01-01 to 2000-01-01
	pgEpochMicros = pgEpochDays * 86400 * 1e6 // microseconds between the epochs
	microsPerDay  = int64(86400 * 1e6)
)

// decodeDate returns days since 1970-01-01. Text input is ISO 8601
// (YYYY-MM-DD), "epoch", "infinity" or "-infinity"; other DateStyle-dependent
// spellings are refused rather than guessed.
func decodeDate(f Format, raw []byte) (int64, error) {
	if f == BinaryFormat {
		if len(raw) != 4 {
			return 0, pgerr.New(pgerr.InvalidBinaryRepresention, "incorrect binary data format for date")
		}
		d := int32(binary.BigEndian.Uint32(raw))
		switch d {
		case math.MaxInt32:
			return math.MaxInt64, nil
		case math.MinInt32:
			return math.MinInt64, nil
		}
		return int64(d) + pgEpochDays, nil
	}
	s := trimSpace(raw)
	switch string(s) {
	case "infinity", "+infinity":
		return math.MaxInt64, nil
	case "-infinity":
		return math.MinInt64, nil
	case "epoch":
		return 0, nil
	}
	days, rest, ok := parseISODate(s)
	if !ok || len(rest) != 0 {
		return 0, badDatetime(Date, raw)
	}
	return days, nil
}

// decodeTimestamp returns microseconds since 1970-01-01 00:00:00 (UTC for
// timestamptz). A timestamptz in text must carry an explicit offset (Z,
// UTC, GMT, +HH, +HH:MM, +HHMM): without one its meaning depends on the
// session's TimeZone, and routing must not guess. A zone written on a
// timestamp without time zone is ignored, as Postgres ignores it.
func decodeTimestamp(t ColumnType, f Format, raw []byte) (int64, error) {
	if f == BinaryFormat {
		if len(raw) != 8 {
			return 0, pgerr.New(pgerr.InvalidBinaryRepresention, "incorrect binary data format for %s", t)
		}
		us := int64(binary.BigEndian.Uint64(raw))
		if us == math.MaxInt64 || us == math.MinInt64 {
			return us, nil
		}
		if us > math.MaxInt64-pgEpochMicros {
			return 0, outOfRange(t, raw)
		}
		return us + pgEpochMicros, nil
	}
	s := trimSpace(raw)
	switch string(s) {
	case "infinity", "+infinity":
		return math.MaxInt64, nil
	case "-infinity":
		return math.MinInt64, nil
	case "epoch":
		return 0, nil
	}
	days, rest, ok := parseISODate(s)
	if !ok {
		return 0, badDatetime(t, raw)
	}
	us := days * microsPerDay
	if len(rest) > 0 && (rest[0] == ' ' || rest[0] == 'T') && len(rest) > 1 && rest[1] >= '0' && rest[1] <= '9' {
		tod, r, ok := parseTimeOfDay(rest[1:])
		if !ok {
			return 0, badDatetime(t, raw)
		}
		us += tod
		rest = r
	}
	for len(rest) > 0 && rest[0] == ' ' {
		rest = rest[1:]
	}
	if len(rest) == 0 {
		if t == Timestamptz {
			return 0, pgerr.New(pgerr.InvalidDatetimeFormat,
				"timestamptz shard-key value %q needs an explicit UTC offset to be routed", string(raw))
		}
		return us, nil
	}
	off, ok := parseZone(rest)
	if !ok {
		return 0, badDatetime(t, raw)
	}
	if t == Timestamptz {
		us -= off * 1e6
	}
	return us, nil
}

func badDatetime(t ColumnType, raw []byte) error {
	return pgerr.New(pgerr.InvalidDatetimeFormat,
		"invalid input syntax for type %s: %q (shard-key values must be ISO 8601)", t, string(raw))
}

// parseISODate parses YYYY-MM-DD (four or more year digits, AD only) and
// returns days since 1970-01-01 and the unparsed rest.
func parseISODate(s []byte) (days int64, rest []byte, ok bool) {
	y, s, ok := digits(s, 4, 7)
	if !ok || len(s) == 0 || s[0] != '-' {
		return 0, nil, false
	}
	m, s, ok := digits(s[1:], 2, 2)
	if !ok || len(s) == 0 || s[0] != '-' {
		return 0, nil, false
	}
	d, s, ok := digits(s[1:], 2, 2)
	if !ok || y < 1 || m < 1 || m > 12 || d < 1 || d > daysIn(y, m) {
		return 0, nil, false
	}
	return daysFromCivil(y, m, d), s, true
}

// parseTimeOfDay parses HH:MM[:SS[.ffffff]] into microseconds. More than
// six fractional digits are refused: Postgres would round them, and a
// routing key must not depend on rounding rules.
func parseTimeOfDay(s []byte) (int64, []byte, bool) {
	h, s, ok := digits(s, 1, 2)
	if !ok || len(s) == 0 || s[0] != ':' {
		return 0, nil, false
	}
	m, s, ok := digits(s[1:], 2, 2)
	if !ok {
		return 0, nil, false
	}
	var sec, frac int64
	if len(s) > 0 && s[0] == ':' {
		if sec, s, ok = digits(s[1:], 2, 2); !ok {
			return 0, nil, false
		}
		if len(s) > 0 && s[0] == '.' {
			s = s[1:]
			n := 0
			for len(s) > 0 && s[0] >= '0' && s[0] <= '9' {
				if n == 6 {
					return 0, nil, false
				}
				frac = frac*10 + int64(s[0]-'0')
				n++
				s = s[1:]
			}
			for ; n < 6; n++ {
				frac *= 10
			}
		}
	}
	if h > 24 || m > 59 || sec > 60 || (h == 24 && (m != 0 || sec != 0 || frac != 0)) {
		return 0, nil, false
	}
	return ((h*60+m)*60+sec)*1e6 + frac, s, true
}

// parseZone parses Z, UTC, GMT or a numeric offset and returns it in
// seconds east of UTC.
func parseZone(s []byte) (int64, bool) {
	switch string(s) {
	case "Z", "z", "UTC", "utc", "GMT", "gmt", "+00", "-00":
		return 0, true
	}
	if s[0] != '+' && s[0] != '-' {
		return 0, false
	}
	sign := int64(1)
	if s[0] == '-' {
		sign = -1
	}
	h, r, ok := digits(s[1:], 1, 2)
	if !ok {
		return 0, false
	}
	var m, sec int64
	if len(r) > 0 && r[0] == ':' {
		r = r[1:]
	}
	if len(r) > 0 {
		if m, r, ok = digits(r, 2, 2); !ok {
			return 0, false
		}
		if len(r) > 0 && r[0] == ':' {
			r = r[1:]
		}
		if len(r) > 0 {
			if sec, r, ok = digits(r, 2, 2); !ok || len(r) != 0 {
				return 0, false
			}
		}
	}
	if h > 15 || m > 59 || sec > 59 {
		return 0, false
	}
	return sign * (h*3600 + m*60 + sec), true
}

// digits reads between min and max decimal digits.
func digits(s []byte, min, max int) (int64, []byte, bool) {
	var v int64
	n := 0
	for n < len(s) && n < max && s[n] >= '0' && s[n] <= '9' {
		v = v*10 + int64(s[n]-'0')
		n++
	}
	if n < min {
		return 0, s, false
	}
	return v, s[n:], true
}

func isLeap(y int64) bool { return y%4 == 0 && (y%100 != 0 || y%400 == 0) }

func daysIn(y, m int64) int64 {
	switch m {
	case 2:
		if isLeap(y) {
			return 29
		}
		return 28
	case 4, 6, 9, 11:
		return 30
	}
	return 31
}

// daysFromCivil converts a proleptic Gregorian date to days since
// 1970-01-01 (Howard Hinnant's algorithm).
func daysFromCivil(y, m, d int64) int64 {
	if m <= 2 {
		y--
	}
	era := y / 400
	yoe := y - era*400
	mp := (m + 9) % 12
	doy := (153*mp+2)/5 + d - 1
	doe := yoe*365 + yoe/4 - yoe/100 + doy
	return era*146097 + doe - 719468
}
