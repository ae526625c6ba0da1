// Package pgwire holds the few Postgres protocol helpers that the router
// and the sidecar share: building the messages Tessera writes itself,
// reading an ErrorResponse, a RowDescription or a DataRow, walking whole
// messages by their headers, and quoting SQL literals. Client-facing decoding lives in the router, and
// everything else stays bytes (seed 003).
package pgwire

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
)

// AppendError appends an ErrorResponse for err, with its SQLSTATE.
func AppendError(dst []byte, severity string, err error) []byte {
	code := pgerr.Code(err)
	msg, detail := err.Error(), ""
	if pe, ok := err.(*pgerr.Error); ok {
		msg, detail = pe.Message, pe.Detail
	}
	return appendFields(dst, 'E', severity, code, msg, detail)
}

// AppendNotice appends a NoticeResponse of severity NOTICE (SQLSTATE
// 00000), as Postgres sends one for RAISE NOTICE.
func AppendNotice(dst []byte, msg string) []byte {
	return appendFields(dst, 'N', "NOTICE", "00000", msg, "")
}

// appendFields appends an ErrorResponse or NoticeResponse (typ) with the
// fields Tessera sets.
func appendFields(dst []byte, typ byte, severity, code, msg, detail string) []byte {
	start := len(dst)
	dst = append(dst, typ, 0, 0, 0, 0)
	for _, f := range [...]struct {
		t byte
		v string
	}{{'S', severity}, {'V', severity}, {'C', code}, {'M', msg}, {'D', detail}} {
		if f.v == "" {
			continue
		}
		dst = append(dst, f.t)
		dst = append(dst, f.v...)
		dst = append(dst, 0)
	}
	dst = append(dst, 0)
	binary.BigEndian.PutUint32(dst[start+1:], uint32(len(dst)-start-1))
	return dst
}

// ParseError decodes a whole ErrorResponse message (type byte included)
// into the fields Tessera uses.
func ParseError(msg []byte) *pgerr.Error {
	e := &pgerr.Error{Code: pgerr.InternalError}
	if len(msg) < 5 {
		return e
	}
	b := msg[5:]
	for len(b) > 1 {
		t := b[0]
		end := 1
		for end < len(b) && b[end] != 0 {
			end++
		}
		v := string(b[1:end])
		switch t {
		case 'C':
			e.Code = v
		case 'M':
			e.Message = v
		case 'D':
			e.Detail = v
		}
		if end >= len(b) {
			break
		}
		b = b[end+1:]
	}
	return e
}

// AppendReadyForQuery appends ReadyForQuery with a transaction status.
func AppendReadyForQuery(dst []byte, status byte) []byte {
	return append(dst, 'Z', 0, 0, 0, 5, status)
}

// AppendQuery appends a simple-protocol Query message.
func AppendQuery(dst []byte, sql string) []byte {
	start := len(dst)
	dst = append(dst, 'Q', 0, 0, 0, 0)
	dst = append(dst, sql...)
	dst = append(dst, 0)
	binary.BigEndian.PutUint32(dst[start+1:], uint32(len(dst)-start-1))
	return dst
}

// Messages walks the whole messages in b, calling fn with each one's type
// and bytes. It reads only headers.
func Messages(b []byte, fn func(typ byte, msg []byte) error) error {
	for len(b) > 0 {
		if len(b) < 5 {
			return fmt.Errorf("truncated message")
		}
		n := int(binary.BigEndian.Uint32(b[1:]))
		if n < 4 || n+1 > len(b) {
			return fmt.Errorf("message %q has invalid length %d", b[0], n)
		}
		if err := fn(b[0], b[:n+1]); err != nil {
			return err
		}
		b = b[n+1:]
	}
	return nil
}

// QuoteLiteral quotes a string as an SQL literal that means the same
// whatever standard_conforming_strings is.
func QuoteLiteral(s string) string {
	if strings.ContainsRune(s, '\\') {
		return "E'" + strings.NewReplacer(`\`, `\\`, `'`, `''`).Replace(s) + "'"
	}
	return "'" + strings.ReplaceAll(s, "'", "''") + "'"
}

// DataRowValues splits a DataRow message (its type byte and length
// included) into its values, nil for NULL; it returns nil for a
// malformed message.
func DataRowValues(msg []byte) [][]byte {
	if len(msg) < 7 || msg[0] != 'D' {
		return nil
	}
	n := int(binary.BigEndian.Uint16(msg[5:]))
	out := make([][]byte, 0, n)
	at := 7
	for i := 0; i < n; i++ {
		if at+4 > len(msg) {
			return nil
		}
		l := int32(binary.BigEndian.Uint32(msg[at:]))
		at += 4
		if l < 0 {
			out = append(out, nil)
			continue
		}
		if at+int(l) > len(msg) {
			return nil
		}
		// Capped: appending to a value must not write over the next.
		// A zero-length value is not NULL: it stays non-nil.
		out = append(out, msg[at:at+int(l):at+int(l)])
		at += int(l)
	}
	return out
}

// rowDescriptionFields calls fn with each field of a RowDescription
// message: its name and the 18 bytes after it (table OID, column number,
// type OID, size, modifier, format). It reports false for a malformed
// message.
func rowDescriptionFields(msg []byte, fn func(name string, rest []byte)) bool {
	if len(msg) < 7 || msg[0] != 'T' {
		return false
	}
	n := int(binary.BigEndian.Uint16(msg[5:]))
	at := 7
	for i := 0; i < n; i++ {
		end := bytes.IndexByte(msg[at:], 0)
		if end < 0 || at+end+1+18 > len(msg) {
			return false
		}
		fn(string(msg[at:at+end]), msg[at+end+1:at+end+1+18])
		at += end + 1 + 18
	}
	return true
}

// RowDescriptionNames returns the field names of a RowDescription
// message, nil for a malformed one.
func RowDescriptionNames(msg []byte) []string {
	var out []string
	if !rowDescriptionFields(msg, func(name string, _ []byte) { out = append(out, name) }) {
		return nil
	}
	return out
}

// RowDescriptionTypes returns the type OIDs of a RowDescription
// message's fields, nil for a malformed one.
func RowDescriptionTypes(msg []byte) []uint32 {
	var out []uint32
	if !rowDescriptionFields(msg, func(_ string, rest []byte) { out = append(out, binary.BigEndian.Uint32(rest[6:])) }) {
		return nil
	}
	return out
}
