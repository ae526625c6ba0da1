// Package copysplit splits the data of a COPY ... FROM STDIN, as it
// streams, into the pieces a router sends to different shards: rows,
// each with its shard-key field, and the parts every shard needs (a
// header line, the binary header and trailer). It reads each row only as
// far as finding its key needs, with Postgres's own rules for where a row
// ends (copyfromparse.c: end-of-line styles, backslash escapes, CSV
// quotes and embedded newlines, the \. end marker) so that each shard
// parses its rows exactly as one Postgres would have.
//
// Whatever the splitter cannot read as Postgres reads it (a row without
// its key field, a corrupt binary tuple, an inconsistent line ending) it
// gives up on as a Misfit: the caller sends it to one shard, whose
// Postgres then reports the error it would report on one server; if that
// Postgres accepts it instead, the caller must refuse the whole COPY,
// because the row may be on the wrong shard. It never guesses.
//
// The package knows nothing of shards or topologies: hashing the key is
// the caller's.
package copysplit

import (
	"bytes"
	"encoding/binary"

	"github.com/tesseradb/tessera/pgerr"
)

// Format is a COPY data format.
type Format uint8

const (
	Text Format = iota
	CSV
	Binary
)

// Options are the COPY options that shape how rows are read, with
// Postgres's defaults filled in (Defaults).
type Options struct {
	Format    Format
	Delimiter byte
	Quote     byte // CSV
	Escape    byte // CSV
	Null      string
	Header    bool // text and CSV: the first line is a header
	// Columns is the number of columns the COPY fills; Key is the
	// 0-based position of the shard-key column among them.
	Columns, Key int
	// ForceNull and ForceNotNull: CSV's FORCE_NULL and FORCE_NOT_NULL
	// name the key column.
	ForceNull, ForceNotNull bool
}

// Defaults fills the options left unset with Postgres's defaults for the
// format: delimiter tab (text) or comma (CSV), NULL \N (text) or the
// empty string (CSV), quote and escape the double quote.
func (o *Options) Defaults(delimiterSet, nullSet, quoteSet, escapeSet bool) {
	if !delimiterSet {
		o.Delimiter = '\t'
		if o.Format == CSV {
			o.Delimiter = ','
		}
	}
	if !nullSet {
		o.Null = `\N`
		if o.Format == CSV {
			o.Null = ""
		}
	}
	if !quoteSet {
		o.Quote = '"'
	}
	if !escapeSet {
		o.Escape = o.Quote
	}
}

// Kind says what a piece of the stream is and where it goes.
type Kind uint8

const (
	// Row is one data row: to the shard its key routes to.
	Row Kind = iota
	// Preamble is the header line or the binary file header: to every
	// shard, before any row.
	Preamble
	// Trailer is the binary end marker: to every shard.
	Trailer
	// Misfit is data the splitter cannot place: to one shard, whose
	// Postgres is expected to refuse it.
	Misfit
)

// Piece is a part of the stream. Data (the bytes to send, as they came)
// and Key are valid only during the call that receives them.
type Piece struct {
	Kind Kind
	Data []byte
	// Key is a Row's shard-key field: the value Postgres's input
	// function reads (text and CSV, unescaped) or receives (binary);
	// Null says the field is NULL.
	Key  []byte
	Null bool
}

// MaxRow bounds the bytes of one row the splitter holds while it waits
// for the row's end.
const MaxRow = 64 << 20

// ErrRowTooLarge: a row longer than MaxRow.
var ErrRowTooLarge = pgerr.New(pgerr.FeatureNotSupported,
	"a COPY row longer than 64 MiB into a sharded table is not supported")

type eolStyle uint8

const (
	eolUnknown eolStyle = iota
	eolNL
	eolCR
	eolCRNL
)

// Splitter splits one COPY stream. Its zero value is not usable: see New.
type Splitter struct {
	o   Options
	buf []byte // data received and not yet emitted
	// scan is how far the current line has been scanned, and the CSV
	// quote state there (text and CSV).
	scan                 int
	inQuote, lastWasEsc  bool
	eol                  eolStyle
	headerDone           bool
	ended                bool // text/CSV \. or binary trailer seen
	poisoned             bool // everything from here on is a Misfit
	scratch              []byte
	binaryHeaderReceived bool
}

// New returns a splitter for a stream with options o.
func New(o Options) *Splitter {
	return &Splitter{o: o, headerDone: !o.Header || o.Format == Binary}
}

// Write takes the next bytes of the stream and emits, in stream order,
// every piece they complete.
func (s *Splitter) Write(data []byte, emit func(Piece) error) error {
	if s.poisoned {
		return emit(Piece{Kind: Misfit, Data: data})
	}
	if s.ended && s.o.Format != Binary {
		// Postgres ignores what follows the end marker.
		return nil
	}
	s.buf = append(s.buf, data...)
	if err := s.drain(false, emit); err != nil {
		return err
	}
	if len(s.buf) > MaxRow {
		return ErrRowTooLarge
	}
	return nil
}

// End says the stream ended (CopyDone): a last line without a line
// ending is a row, and a partial binary tuple is a Misfit.
func (s *Splitter) End(emit func(Piece) error) error {
	if s.poisoned || s.ended && s.o.Format != Binary {
		return nil
	}
	return s.drain(true, emit)
}

// drain emits the complete pieces at the front of s.buf and keeps the
// rest.
func (s *Splitter) drain(final bool, emit func(Piece) error) error {
	var err error
	used := 0
	if s.o.Format == Binary {
		used, err = s.binaryPieces(final, emit)
	} else {
		used, err = s.linePieces(final, emit)
	}
	if s.poisoned && err == nil && used < len(s.buf) {
		err = emit(Piece{Kind: Misfit, Data: s.buf[used:]})
		used = len(s.buf)
	}
	n := copy(s.buf, s.buf[used:])
	s.buf = s.buf[:n]
	s.scan -= used
	return err
}

// binaryPieces emits the file header, whole tuples and the trailer.
func (s *Splitter) binaryPieces(final bool, emit func(Piece) error) (int, error) {
	b := s.buf
	at := 0
	if !s.binaryHeaderReceived {
		n, ok := binaryHeader(b)
		switch {
		case ok && n <= len(b):
			if err := emit(Piece{Kind: Preamble, Data: b[:n]}); err != nil {
				return 0, err
			}
			at, s.binaryHeaderReceived = n, true
		case !ok || final:
			s.poisoned = true
			return 0, nil
		default:
			return 0, nil
		}
	}
	for at < len(b) {
		if s.ended {
			// Postgres refuses data after the trailer.
			s.poisoned = true
			return at, nil
		}
		n, key, null, status := s.binaryTuple(b[at:])
		switch status {
		case tupleShort:
			if final {
				s.poisoned = true
			}
			return at, nil
		case tupleBad:
			s.poisoned = true
			return at, nil
		case tupleTrailer:
			if err := emit(Piece{Kind: Trailer, Data: b[at : at+2]}); err != nil {
				return at, err
			}
			s.ended = true
		default:
			if err := emit(Piece{Kind: Row, Data: b[at : at+n], Key: key, Null: null}); err != nil {
				return at, err
			}
		}
		at += n
	}
	return at, nil
}

var binarySignature = []byte("PGCOPY\n\xff\r\n\x00")

// binaryHeader returns the length of the binary file header at the start
// of b (which may be longer than b), or false when b cannot start one.
func binaryHeader(b []byte) (int, bool) {
	n := min(len(b), len(binarySignature))
	if !bytes.Equal(b[:n], binarySignature[:n]) {
		return 0, false
	}
	const fixed = 11 + 4 + 4
	if len(b) < fixed {
		return fixed, true
	}
	ext := int32(binary.BigEndian.Uint32(b[15:]))
	if ext < 0 || ext > MaxRow {
		return 0, false
	}
	return fixed + int(ext), true
}

type tupleStatus uint8

const (
	tupleWhole tupleStatus = iota
	tupleShort
	tupleBad
	tupleTrailer
)

// binaryTuple reads the tuple at the start of b: its length and key.
func (s *Splitter) binaryTuple(b []byte) (n int, key []byte, null bool, st tupleStatus) {
	if len(b) < 2 {
		return 0, nil, false, tupleShort
	}
	count := int(int16(binary.BigEndian.Uint16(b)))
	if count == -1 {
		return 2, nil, false, tupleTrailer
	}
	if count != s.o.Columns {
		// Postgres refuses a tuple with another field count.
		return 0, nil, false, tupleBad
	}
	at := 2
	for i := 0; i < count; i++ {
		if len(b) < at+4 {
			return 0, nil, false, tupleShort
		}
		size := int(int32(binary.BigEndian.Uint32(b[at:])))
		at += 4
		switch {
		case size == -1:
			if i == s.o.Key {
				null = true
			}
			continue
		case size < 0 || size > MaxRow:
			return 0, nil, false, tupleBad
		case len(b) < at+size:
			return 0, nil, false, tupleShort
		}
		if i == s.o.Key {
			key = b[at : at+size]
		}
		at += size
	}
	return at, key, null, tupleWhole
}
