package shardfunc

import (
	"encoding/binary"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/zeebo/xxh3"
)

// Kind names a sharding function, the "type" of a shard index.
type Kind uint8

const (
	XXHash Kind = iota + 1
	Modulo
	Range
)

var kindNames = map[string]Kind{"xxhash": XXHash, "modulo": Modulo, "range": Range}

// ParseKind returns the Kind named by a shard index "type".
func ParseKind(name string) (Kind, bool) {
	k, ok := kindNames[name]
	return k, ok
}

func (k Kind) String() string {
	switch k {
	case XXHash:
		return "xxhash"
	case Modulo:
		return "modulo"
	case Range:
		return "range"
	}
	return "invalid"
}

// Func is a configured sharding function: a Kind and, for modulo, its
// modulus. The zero Func is invalid.
type Func struct {
	Kind    Kind
	Modulus uint64
}

// Accepts reports whether values of type t can be routed by f.
func (f Func) Accepts(t ColumnType) error {
	if t.String() == "invalid" {
		return pgerr.New(pgerr.FeatureNotSupported, "unsupported shard-key type")
	}
	if f.Kind != XXHash && !t.IsInteger() {
		return pgerr.New(pgerr.FeatureNotSupported, "a %s shard index needs an integer column (int2, int4 or int8), not %s", f.Kind, t)
	}
	return nil
}

// KeyInt returns the routing key of an integer shard-key value. It never
// allocates unless it fails.
func (f Func) KeyInt(v int64) (uint64, error) {
	switch f.Kind {
	case XXHash:
		var b [8]byte
		binary.BigEndian.PutUint64(b[:], uint64(v))
		return xxh3.Hash(b[:]), nil
	case Modulo, Range:
		if v < 0 {
			return 0, pgerr.New(pgerr.NumericValueOutOfRange, "%s shard index: negative shard-key value %d", f.Kind, v)
		}
		if f.Kind == Modulo {
			return uint64(v) % f.Modulus, nil
		}
		return uint64(v), nil
	}
	return 0, pgerr.New(pgerr.InternalError, "invalid sharding function")
}

// HashCanonical returns the xxhash routing key of a canonical encoding (see
// AppendCanonical).
func HashCanonical(canonical []byte) uint64 { return xxh3.Hash(canonical) }

// Key returns the routing key of a value of type t as a client sent it, in
// text or binary format. Integer, text and fixed-size values do not allocate.
func (f Func) Key(t ColumnType, format Format, raw []byte) (uint64, error) {
	if err := f.Accepts(t); err != nil {
		return 0, err
	}
	if t.IsInteger() {
		v, err := DecodeInt(t, format, raw)
		if err != nil {
			return 0, err
		}
		return f.KeyInt(v)
	}
	switch t {
	case Text, Varchar, Name:
		return xxh3.Hash(raw), nil
	case Bpchar:
		return xxh3.Hash(trimTrailingBlanks(raw)), nil
	case Bytea:
		if format == BinaryFormat {
			return xxh3.Hash(raw), nil
		}
	}
	var buf [MaxCanonicalStack]byte
	canon, err := AppendCanonical(buf[:0], t, format, raw)
	if err != nil {
		return 0, err
	}
	return xxh3.Hash(canon), nil
}
