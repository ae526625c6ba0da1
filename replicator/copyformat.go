package replicator

import (
	"bytes"
	"encoding/binary"
	"io"

	"github.com/tesseradb/tessera/pgerr"
)

// badCopyFileFormat is Postgres's SQLSTATE for a malformed COPY stream.
const badCopyFileFormat = "22P04"

// copySignature opens every binary COPY stream.
var copySignature = []byte("PGCOPY\n\xff\r\n\x00")

// copyHeader is the header this package writes: the signature, no flags
// and no header extension.
var copyHeader = append(append([]byte{}, copySignature...), 0, 0, 0, 0, 0, 0, 0, 0)

// copyTrailer is the field count -1 that ends a binary COPY stream.
var copyTrailer = []byte{0xff, 0xff}

const (
	// oidsFlag (bit 16) says each tuple carries an OID, which Postgres 12
	// and later never send; bits 17-31 are critical flags no version
	// defines, which a reader must refuse.
	oidsFlag          = 1 << 16
	criticalFlagsMask = 0xffff0000
	// maxTupleBytes bounds one tuple. Postgres caps a field at 1 GB; a
	// tuple claiming more is corrupt, and refusing it keeps a malformed
	// length from growing the buffer without bound.
	maxTupleBytes = 1 << 30
	readChunk     = 64 << 10
)

func copyFormatError(format string, args ...any) error {
	return pgerr.New(badCopyFileFormat, "binary COPY: "+format, args...)
}

// copyReader reads a binary COPY stream tuple by tuple into one reused
// buffer. A tuple is held contiguously, so its bytes can be forwarded as
// they are; the buffer grows only for a tuple larger than any before it.
type copyReader struct {
	src    io.Reader
	buf    []byte
	start  int // first unconsumed byte
	end    int // end of valid data
	eof    bool
	fields int // field count of the first tuple; every tuple must match
}

func (r *copyReader) reset(src io.Reader) {
	if r.buf == nil {
		r.buf = make([]byte, readChunk)
	}
	r.src, r.start, r.end, r.eof, r.fields = src, 0, 0, false, -1
}

// ensure makes n unconsumed bytes available contiguously at r.start. It
// reports false at a clean end of input with fewer than n bytes.
func (r *copyReader) ensure(n int) (bool, error) {
	for r.end-r.start < n {
		if r.eof {
			return false, nil
		}
		if r.start > 0 && (r.start+n > len(r.buf) || r.end == len(r.buf)) {
			r.end = copy(r.buf, r.buf[r.start:r.end])
			r.start = 0
		}
		if r.end == len(r.buf) {
			// Grow by doubling, as the data actually arrives: a length
			// that only claims to be large allocates nothing until its
			// bytes come.
			grown := make([]byte, min(max(2*len(r.buf), readChunk), maxTupleBytes+readChunk))
			r.end = copy(grown, r.buf[:r.end])
			r.buf = grown
		}
		m, err := r.src.Read(r.buf[r.end:])
		r.end += m
		if err == io.EOF {
			r.eof = true
		} else if err != nil {
			return false, err
		}
	}
	return true, nil
}

// readHeader consumes the stream's header.
func (r *copyReader) readHeader() error {
	ok, err := r.ensure(len(copySignature) + 8)
	if err != nil {
		return err
	}
	if !ok || !bytes.Equal(r.buf[r.start:r.start+len(copySignature)], copySignature) {
		return copyFormatError("missing PGCOPY signature")
	}
	p := r.start + len(copySignature)
	flags := binary.BigEndian.Uint32(r.buf[p:])
	extLen := int64(int32(binary.BigEndian.Uint32(r.buf[p+4:])))
	if flags&oidsFlag != 0 {
		return copyFormatError("tuples with OIDs are not supported")
	}
	if flags&criticalFlagsMask != 0 {
		return copyFormatError("unknown critical flags %#x in header", flags&criticalFlagsMask)
	}
	if extLen < 0 || extLen > maxTupleBytes {
		return copyFormatError("invalid header extension length %d", extLen)
	}
	r.start = p + 8
	if ok, err := r.ensure(int(extLen)); err != nil {
		return err
	} else if !ok {
		return copyFormatError("header extension cut short")
	}
	r.start += int(extLen)
	return nil
}

// tuple is one tuple's bytes in the reader's buffer, valid until the next
// call to next.
type tuple struct {
	raw []byte
}

// next reads the next tuple. It returns done at the trailer, after checking
// that nothing follows it. The bytes of field keyField are returned as key,
// or keyNull for a NULL; a negative keyField decodes no field.
func (r *copyReader) next(keyField int) (t tuple, key []byte, keyNull bool, done bool, err error) {
	ok, err := r.ensure(2)
	if err != nil {
		return t, nil, false, false, err
	}
	if !ok {
		return t, nil, false, false, copyFormatError("stream ends without a trailer")
	}
	count := int(int16(binary.BigEndian.Uint16(r.buf[r.start:])))
	if count == -1 {
		r.start += 2
		if ok, err := r.ensure(1); err != nil {
			return t, nil, false, false, err
		} else if ok {
			return t, nil, false, false, copyFormatError("data after the trailer")
		}
		return t, nil, false, true, nil
	}
	if count < 0 {
		return t, nil, false, false, copyFormatError("invalid field count %d", count)
	}
	if r.fields < 0 {
		r.fields = count
	} else if count != r.fields {
		return t, nil, false, false, copyFormatError("tuple has %d fields, earlier tuples %d", count, r.fields)
	}
	if keyField >= count {
		return t, nil, false, false, copyFormatError("tuple has %d fields, the shard key is field %d", count, keyField+1)
	}
	// Walk the field lengths with offsets relative to the tuple's start,
	// which stay valid when ensure moves the data.
	off := 2
	keyOff, keyLen := 0, -1
	for i := 0; i < count; i++ {
		if ok, err := r.ensure(off + 4); err != nil {
			return t, nil, false, false, err
		} else if !ok {
			return t, nil, false, false, copyFormatError("tuple cut short")
		}
		n := int(int32(binary.BigEndian.Uint32(r.buf[r.start+off:])))
		off += 4
		if n < -1 {
			return t, nil, false, false, copyFormatError("invalid field length %d", n)
		}
		if i == keyField {
			keyOff, keyLen = off, n
		}
		if n > 0 {
			if off+n > maxTupleBytes {
				return t, nil, false, false, copyFormatError("tuple larger than %d bytes", maxTupleBytes)
			}
			off += n
		}
	}
	if ok, err := r.ensure(off); err != nil {
		return t, nil, false, false, err
	} else if !ok {
		return t, nil, false, false, copyFormatError("tuple cut short")
	}
	t.raw = r.buf[r.start : r.start+off : r.start+off]
	r.start += off
	if keyField < 0 {
		return t, nil, false, false, nil
	}
	if keyLen < 0 {
		return t, nil, true, false, nil
	}
	return t, t.raw[keyOff : keyOff+keyLen], false, false, nil
}

// field returns field i of a tuple's bytes (nil and false for NULL or for
// a field the tuple does not have). The tuple is known to be well formed.
func (t tuple) field(i int) ([]byte, bool) {
	count := int(binary.BigEndian.Uint16(t.raw))
	off := 2
	for j := 0; j < count; j++ {
		n := int(int32(binary.BigEndian.Uint32(t.raw[off:])))
		off += 4
		if j == i {
			if n < 0 {
				return nil, false
			}
			return t.raw[off : off+n], true
		}
		if n > 0 {
			off += n
		}
	}
	return nil, false
}
