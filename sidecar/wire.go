package sidecar

import (
	"encoding/binary"
	"fmt"
	"io"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
)

// Backend message types the sidecar looks at. Everything else passes
// through as opaque bytes.
const (
	msgReadyForQuery   = 'Z'
	msgParseComplete   = '1'
	msgCopyInResponse  = 'G'
	msgCopyBoth        = 'W'
	msgErrorResponse   = 'E'
	msgCommandComplete = 'C'
)

// maxBackendMessage bounds one backend message; Postgres's own limit for
// a field is 1 GB, and a larger length means a corrupt stream.
const maxBackendMessage = 1 << 30

// readMessage appends the next whole backend message (type, length, body)
// to dst and returns it with the message type. The body is read straight
// into dst: the bytes are forwarded, never decoded or copied again.
func readMessage(r io.Reader, dst []byte) ([]byte, byte, error) {
	start := len(dst)
	dst = append(dst, 0, 0, 0, 0, 0)
	if _, err := io.ReadFull(r, dst[start:start+5]); err != nil {
		return dst[:start], 0, err
	}
	typ := dst[start]
	n := int(binary.BigEndian.Uint32(dst[start+1:]))
	if n < 4 || n > maxBackendMessage {
		return dst[:start], 0, fmt.Errorf("backend message %q has invalid length %d", typ, n)
	}
	dst = grow(dst, n-4)
	if _, err := io.ReadFull(r, dst[len(dst)-(n-4):]); err != nil {
		return dst[:start], 0, err
	}
	return dst, typ, nil
}

// grow extends b by n bytes.
func grow(b []byte, n int) []byte {
	if cap(b)-len(b) >= n {
		return b[:len(b)+n]
	}
	nb := make([]byte, len(b)+n, 2*cap(b)+n)
	copy(nb, b)
	return nb
}

// appendErrorResponse appends a Postgres ErrorResponse, for failures the
// sidecar itself reports inside a batch's answer (pool exhausted, backend
// lost), so that the router forwards them to the client like any other.
func appendErrorResponse(dst []byte, severity, code, message string) []byte {
	return pgwire.AppendError(dst, severity, &pgerr.Error{Code: code, Message: message})
}

// appendError appends an ErrorResponse for err with its SQLSTATE.
func appendError(dst []byte, err error) []byte { return pgwire.AppendError(dst, "ERROR", err) }

// appendParse appends a Parse message.
func appendParse(dst []byte, name, query string, oids []uint32) []byte {
	start := len(dst)
	dst = append(dst, 'P', 0, 0, 0, 0)
	dst = append(dst, name...)
	dst = append(dst, 0)
	dst = append(dst, query...)
	dst = append(dst, 0)
	dst = binary.BigEndian.AppendUint16(dst, uint16(len(oids)))
	for _, o := range oids {
		dst = binary.BigEndian.AppendUint32(dst, o)
	}
	binary.BigEndian.PutUint32(dst[start+1:], uint32(len(dst)-start-1))
	return dst
}

// appendCloseStatement appends a Close of the named prepared statement.
func appendCloseStatement(dst []byte, name string) []byte {
	dst = binary.BigEndian.AppendUint32(append(dst, 'C'), uint32(4+1+len(name)+1))
	dst = append(append(dst, 'S'), name...)
	return append(dst, 0)
}

// frontendEnding returns the type of the last message in a batch of
// frontend messages, checking that the batch is whole messages of types a
// session may send: never Terminate (the sidecar owns the connection) nor
// authentication messages.
func frontendEnding(b []byte) (byte, error) {
	var last byte
	for len(b) > 0 {
		if len(b) < 5 {
			return 0, pgerr.New(pgerr.ProtocolViolation, "batch ends inside a message header")
		}
		n := int(binary.BigEndian.Uint32(b[1:]))
		if n < 4 || n+1 > len(b) {
			return 0, pgerr.New(pgerr.ProtocolViolation, "batch message %q has invalid length %d", b[0], n)
		}
		switch b[0] {
		case 'Q', 'P', 'B', 'D', 'E', 'C', 'S', 'H', 'F', 'd', 'c', 'f':
		default:
			return 0, pgerr.New(pgerr.ProtocolViolation, "frontend message type %q is not allowed in a batch", b[0])
		}
		last = b[0]
		b = b[n+1:]
	}
	if last == 0 {
		return 0, pgerr.New(pgerr.ProtocolViolation, "empty batch")
	}
	return last, nil
}

// demoteFatal rewrites, in place, the severity of an ErrorResponse from
// FATAL or PANIC to ERROR. A backend that ends with FATAL (terminated,
// its postmaster gone, an admin shutdown) ends only that backend: the
// router's session with its client lives on and takes another backend,
// so the client must not read it as the end of its connection, which
// drivers do on FATAL. Both spellings have five letters, so the message
// keeps its length.
func demoteFatal(msg []byte) {
	if len(msg) < 5 {
		return
	}
	b := msg[5:]
	for len(b) > 1 {
		field := b[0]
		end := 1
		for end < len(b) && b[end] != 0 {
			end++
		}
		if v := b[1:end]; (field == 'S' || field == 'V') && (string(v) == "FATAL" || string(v) == "PANIC") {
			copy(v, "ERROR")
		}
		if end >= len(b) {
			return
		}
		b = b[end+1:]
	}
}
