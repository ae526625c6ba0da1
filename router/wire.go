package router

import (
	"bufio"
	"encoding/binary"
	"io"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
)

// reader reads client messages as raw bytes: type, length, body. The body
// slice is valid until the next read.
type reader struct {
	r   *bufio.Reader
	buf []byte
	max int // largest message accepted
	// preAuth: the client has not authenticated yet, so max is
	// maxAuthMessage and a longer message is a protocol violation.
	preAuth bool
	hdr     [5]byte // a field, not a local: io.ReadFull would move a local to the heap
}

// next returns the next message's type and body.
func (r *reader) next() (byte, []byte, error) {
	hdr := r.hdr[:]
	if _, err := io.ReadFull(r.r, hdr); err != nil {
		return 0, nil, err
	}
	n := int(binary.BigEndian.Uint32(hdr[1:]))
	if n < 4 {
		return 0, nil, pgerr.New(pgerr.ProtocolViolation, "invalid message length %d", n)
	}
	if n-4 > r.max {
		if r.preAuth {
			// Postgres's words for an authentication message over
			// PG_MAX_AUTH_TOKEN_LENGTH; the body is never read.
			return 0, nil, pgerr.New(pgerr.ProtocolViolation, "invalid message length")
		}
		return 0, nil, pgerr.New("54000", "message of %d bytes exceeds the %d allowed", n, r.max)
	}
	if cap(r.buf) < n+1 {
		r.buf = make([]byte, n+1, max(n+1, 2*cap(r.buf)))
	}
	msg := r.buf[:n+1]
	copy(msg, hdr)
	if _, err := io.ReadFull(r.r, msg[5:]); err != nil {
		return 0, nil, err
	}
	return hdr[0], msg, nil
}

// cstring reads a NUL-terminated string from b at off.
func cstring(b []byte, off int) (string, int, error) {
	v, next, err := cbytes(b, off)
	return string(v), next, err
}

// cbytes is cstring without the copy: the bytes, valid as b is.
func cbytes(b []byte, off int) ([]byte, int, error) {
	for i := off; i < len(b); i++ {
		if b[i] == 0 {
			return b[off:i], i + 1, nil
		}
	}
	return nil, 0, pgerr.New(pgerr.ProtocolViolation, "unterminated string in message")
}

// Builders of backend messages the router sends itself.

func appendMsg(dst []byte, typ byte, body ...[]byte) []byte {
	start := len(dst)
	dst = append(dst, typ, 0, 0, 0, 0)
	for _, b := range body {
		dst = append(dst, b...)
	}
	binary.BigEndian.PutUint32(dst[start+1:], uint32(len(dst)-start-1))
	return dst
}

func cstr(s string) []byte { return append([]byte(s), 0) }

func appendReady(dst []byte, status byte) []byte { return pgwire.AppendReadyForQuery(dst, status) }

func appendCommandComplete(dst []byte, tag string) []byte { return appendMsg(dst, 'C', cstr(tag)) }

func appendParameterStatus(dst []byte, name, value string) []byte {
	return appendMsg(dst, 'S', cstr(name), cstr(value))
}

// appendError writes err as an ErrorResponse with its SQLSTATE.
func appendError(dst []byte, severity string, err error) []byte {
	return pgwire.AppendError(dst, severity, err)
}

// appendRowDescription describes text columns of type text.
func appendRowDescription(dst []byte, names ...string) []byte {
	var body []byte
	body = binary.BigEndian.AppendUint16(body, uint16(len(names)))
	for _, n := range names {
		body = append(body, n...)
		body = append(body, 0)
		body = binary.BigEndian.AppendUint32(body, 0)  // table oid
		body = binary.BigEndian.AppendUint16(body, 0)  // column
		body = binary.BigEndian.AppendUint32(body, 25) // text
		body = binary.BigEndian.AppendUint16(body, 0xffff)
		body = binary.BigEndian.AppendUint32(body, 0xffffffff)
		body = binary.BigEndian.AppendUint16(body, 0) // text format
	}
	return appendMsg(dst, 'T', body)
}

func appendDataRow(dst []byte, values ...string) []byte {
	var body []byte
	body = binary.BigEndian.AppendUint16(body, uint16(len(values)))
	for _, v := range values {
		body = binary.BigEndian.AppendUint32(body, uint32(len(v)))
		body = append(body, v...)
	}
	return appendMsg(dst, 'D', body)
}

// backendMessages walks whole backend messages in b by their headers.
func backendMessages(b []byte, fn func(typ byte, msg []byte) error) error {
	return pgwire.Messages(b, fn)
}
