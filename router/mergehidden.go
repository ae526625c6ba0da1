package router

import (
	"encoding/binary"
	"fmt"
)

// An engine plan's shards may run SQL with more output columns than the
// client's statement (engine.Plan.Hidden: partial aggregates, group and
// sort keys it does not show). The client must see only its statement's
// own columns: the RowDescription a shard sends is cut to them, and the
// engine drops the hidden values of every row. In the extended protocol
// the client's Bind names result formats for its own columns only;
// Postgres refuses a Bind whose format count is neither 0, 1 nor the
// column count, so the shards get one format per column, the hidden ones
// in text, which the engine reads exactly (pgtype's binary numeric does
// not keep trailing zeros).

// withHiddenFormats returns frontend with each Bind's result formats
// written out for visible + hidden columns: the client's for its own,
// text for the hidden ones. No formats (all text) stay as they are, and
// so does a count that is neither 1 nor the statement's columns.
func withHiddenFormats(frontend []byte, visible, hidden int) ([]byte, error) {
	out := make([]byte, 0, len(frontend)+2*(visible+hidden))
	err := backendMessages(frontend, func(typ byte, msg []byte) error {
		if typ != 'B' {
			out = append(out, msg...)
			return nil
		}
		at, err := resultFormatsAt(msg)
		if err != nil {
			return err
		}
		n := int(binary.BigEndian.Uint16(msg[at:]))
		if n == 0 || n > 1 && n != visible {
			// All text; or a count Postgres refuses (08P01), as the
			// shards then do.
			out = append(out, msg...)
			return nil
		}
		codes := make([]int16, n)
		for i := range codes {
			codes[i] = int16(binary.BigEndian.Uint16(msg[at+2+2*i:]))
		}
		start := len(out)
		out = append(out, msg[:at]...)
		out = binary.BigEndian.AppendUint16(out, uint16(visible+hidden))
		for i := range visible {
			out = binary.BigEndian.AppendUint16(out, uint16(formatOf(codes, i)))
		}
		for range hidden {
			out = binary.BigEndian.AppendUint16(out, 0)
		}
		binary.BigEndian.PutUint32(out[start+1:], uint32(len(out)-start-1))
		return nil
	})
	return out, err
}

// resultFormatsAt is the offset in a Bind message of its result-format
// count.
func resultFormatsAt(msg []byte) (int, error) {
	bad := fmt.Errorf("a malformed Bind")
	_, off, err := cstring(msg, 5) // portal
	if err == nil {
		_, off, err = cstring(msg, off) // statement
	}
	if err != nil || off+2 > len(msg) {
		return 0, bad
	}
	n := int(binary.BigEndian.Uint16(msg[off:]))
	off += 2 + 2*n // parameter formats
	if off+2 > len(msg) {
		return 0, bad
	}
	np := int(binary.BigEndian.Uint16(msg[off:]))
	off += 2
	for range np {
		if off+4 > len(msg) {
			return 0, bad
		}
		size := int(int32(binary.BigEndian.Uint32(msg[off:])))
		off += 4
		if size > 0 {
			off += size
		}
	}
	if off+2 > len(msg) {
		return 0, bad
	}
	if nr := int(binary.BigEndian.Uint16(msg[off:])); off+2+2*nr > len(msg) {
		return 0, bad
	}
	return off, nil
}

// withoutHiddenFields cuts a RowDescription to its first visible fields.
func withoutHiddenFields(msg []byte, visible int) ([]byte, error) {
	if len(msg) < 7 {
		return nil, fmt.Errorf("a short RowDescription")
	}
	off := 7
	for i := 0; i < visible; i++ {
		_, next, err := cstring(msg, off)
		if err != nil || next+18 > len(msg) {
			return nil, fmt.Errorf("a RowDescription of fewer than %d fields", visible)
		}
		off = next + 18 // table OID, attnum, type OID, typlen, typmod, format
	}
	out := append([]byte(nil), msg[:off]...)
	binary.BigEndian.PutUint32(out[1:], uint32(len(out)-1))
	binary.BigEndian.PutUint16(out[5:], uint16(visible))
	return out, nil
}
