package router

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"
	"strings"

	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/router/planner"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// A gather's batched lookups (planner/gather_lookup.go): the values of a
// source table's column are read from its binary COPY rows as they pass
// to the computing backend, then the looked-up table is pulled only from
// the shards owning them, with one array of each shard's values.

// lookupKeys collects the distinct values of one column of a source
// table's pulled rows, up to the planner's bounds.
type lookupKeys struct {
	lookup *planner.GatherLookup
	seen   map[string]struct{}
	bytes  int
	// over: too many values, or a row that could not be read: the
	// looked-up table is pulled whole.
	over bool
}

func newLookupKeys(lk *planner.GatherLookup) *lookupKeys {
	return &lookupKeys{lookup: lk, seen: map[string]struct{}{}}
}

// add reads the column's value from one binary COPY row.
func (k *lookupKeys) add(row []byte) {
	if k.over {
		return
	}
	raw, null, ok := copyField(row, k.lookup.FromColumn)
	switch {
	case !ok:
		k.over, k.seen = true, nil
	case null:
		// NULL equals nothing.
	default:
		if _, dup := k.seen[string(raw)]; dup {
			return
		}
		k.seen[string(raw)] = struct{}{}
		k.bytes += len(raw)
		if len(k.seen) > planner.MaxLookupKeys || k.bytes > planner.MaxLookupBytes {
			k.over, k.seen = true, nil
		}
	}
}

// copyField returns field i of a binary COPY row (null for NULL); ok is
// false for a malformed row.
func copyField(row []byte, i int) (raw []byte, null, ok bool) {
	if len(row) < 2 {
		return nil, false, false
	}
	n := int(int16(binary.BigEndian.Uint16(row)))
	if i >= n {
		return nil, false, false
	}
	b := row[2:]
	for f := 0; ; f++ {
		if len(b) < 4 {
			return nil, false, false
		}
		size := int32(binary.BigEndian.Uint32(b))
		b = b[4:]
		if size < 0 {
			if f == i {
				return nil, true, true
			}
			continue
		}
		if int(size) > len(b) {
			return nil, false, false
		}
		if f == i {
			return b[:size], false, true
		}
		b = b[size:]
	}
}

// pulls returns, for each shard owning some of the values, the pull
// restricted to them, in the order of shards.
func (k *lookupKeys) pulls(shards []string) map[string]string {
	lk := k.lookup
	values := make([]string, 0, len(k.seen))
	for v := range k.seen {
		values = append(values, v)
	}
	slices.Sort(values) // the same SQL for the same values
	elems := map[string][]string{}
	for _, v := range values {
		elem, key, ok := lookupValue(lk, []byte(v))
		if !ok {
			continue // no row can hold it
		}
		shard := lk.Group.ShardFor(key)
		elems[shard] = append(elems[shard], elem)
	}
	out := map[string]string{}
	at := strings.LastIndex(lk.Pull, "$1")
	for _, s := range shards {
		if e := elems[s]; len(e) > 0 {
			out[s] = lk.Pull[:at] + pgwire.QuoteLiteral("{"+strings.Join(e, ",")+"}") + lk.Pull[at+2:]
		}
	}
	return out
}

// lookupValue is a source value (binary) as an element of the key
// column's array literal, and its routing key; ok is false for a value
// no row of the looked-up table can hold (outside the key type's range,
// or refused by the shard function: a negative key of a modulo index).
func lookupValue(lk *planner.GatherLookup, raw []byte) (elem string, key uint64, ok bool) {
	if lk.KeyType.IsInteger() {
		v, err := shardfunc.DecodeInt(lk.FromType, shardfunc.BinaryFormat, raw)
		if err != nil || !fitsInteger(lk.KeyType, v) {
			return "", 0, false
		}
		key, err := lk.Index.Func.KeyInt(v)
		if err != nil {
			return "", 0, false
		}
		return strconv.FormatInt(v, 10), key, true
	}
	key, err := lk.Index.Func.Key(lk.KeyType, shardfunc.BinaryFormat, raw)
	if err != nil {
		return "", 0, false
	}
	return `"` + arrayElementEscaper.Replace(string(raw)) + `"`, key, true
}

// arrayElementEscaper escapes a value for a double-quoted element of an
// array literal.
var arrayElementEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`)

func fitsInteger(t shardfunc.ColumnType, v int64) bool {
	switch t {
	case shardfunc.Int2:
		return v >= math.MinInt16 && v <= math.MaxInt16
	case shardfunc.Int4:
		return v >= math.MinInt32 && v <= math.MaxInt32
	}
	return true
}
