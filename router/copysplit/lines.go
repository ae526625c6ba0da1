package copysplit

// Text and CSV: a row is a line, found as Postgres's CopyReadLineText
// finds it; its key is the field CopyReadAttributesText or
// CopyReadAttributesCSV would read.

type lineStatus uint8

const (
	lineWhole lineStatus = iota
	lineShort            // more data is needed
	lineEnd              // the \. end marker
	lineBad              // Postgres would refuse the stream here
)

// linePieces emits the header line and the rows.
func (s *Splitter) linePieces(final bool, emit func(Piece) error) (int, error) {
	at := 0
	for at < len(s.buf) && !s.ended {
		content, next, status := s.line(at, final)
		switch status {
		case lineShort:
			return at, nil
		case lineBad:
			s.poisoned = true
			return at, nil
		case lineEnd:
			s.ended = true
			return len(s.buf), nil
		}
		whole := s.buf[at:next]
		s.scan, s.inQuote, s.lastWasEsc = next, false, false
		var p Piece
		switch {
		case !s.headerDone:
			s.headerDone = true
			p = Piece{Kind: Preamble, Data: whole}
		default:
			p = s.row(s.buf[at:content], whole)
		}
		if err := emit(p); err != nil {
			return next, err
		}
		at = next
	}
	if s.ended {
		return len(s.buf), nil
	}
	return at, nil
}

// row reads the key field of the line content.
func (s *Splitter) row(content, whole []byte) Piece {
	var key []byte
	var null, ok bool
	if s.o.Format == CSV {
		key, null, ok = s.csvField(content)
	} else {
		key, null, ok = s.textField(content)
	}
	if !ok {
		return Piece{Kind: Misfit, Data: whole}
	}
	return Piece{Kind: Row, Data: whole, Key: key, Null: null}
}

// line scans the line starting at s.buf[start] (resuming at s.scan) and
// returns where its content ends and the next line begins.
func (s *Splitter) line(start int, final bool) (content, next int, status lineStatus) {
	b := s.buf
	csv := s.o.Format == CSV
	// As in Postgres, an escape that is the quote is no escape here
	// (and NUL is then taken for one).
	escape := s.o.Escape
	if escape == s.o.Quote {
		escape = 0
	}
	i := max(s.scan, start)
	for i < len(b) {
		c := b[i]
		i++
		if csv {
			if s.inQuote && c == escape {
				s.lastWasEsc = !s.lastWasEsc
			}
			if c == s.o.Quote && !s.lastWasEsc {
				s.inQuote = !s.inQuote
			}
			if c != escape {
				s.lastWasEsc = false
			}
		}
		switch {
		case c == '\r' && (!csv || !s.inQuote):
			switch s.eol {
			case eolNL:
				return 0, 0, lineBad // a carriage return in data
			case eolUnknown, eolCRNL:
				if i == len(b) && !final {
					s.scan = i - 1
					return 0, 0, lineShort
				}
				if i < len(b) && b[i] == '\n' {
					s.eol = eolCRNL
					return i - 1, i + 1, lineWhole
				}
				if s.eol == eolCRNL {
					return 0, 0, lineBad
				}
				s.eol = eolCR
			}
			return i - 1, i, lineWhole
		case c == '\n' && (!csv || !s.inQuote):
			if s.eol == eolCR || s.eol == eolCRNL {
				return 0, 0, lineBad // a newline in data
			}
			s.eol = eolNL
			return i - 1, i, lineWhole
		case c == '\\' && (!csv || i-1 == start):
			if i == len(b) {
				if !final {
					s.scan = i - 1
					return 0, 0, lineShort
				}
				continue
			}
			if b[i] == '.' {
				st, complete := s.endMarker(start, i-1, final)
				if !complete {
					s.scan = i - 1
					return 0, 0, lineShort
				}
				if st == lineWhole {
					// CSV: an ordinary "\." value.
					continue
				}
				return 0, 0, st
			}
			if !csv {
				i++ // the escaped character is data, a line ending too
			}
		}
	}
	if !final {
		s.scan = i
		return 0, 0, lineShort
	}
	if csv && s.inQuote {
		return 0, 0, lineBad // an unterminated quoted field
	}
	return len(b), len(b), lineWhole
}

// endMarker judges a \. at s.buf[at]: the end marker (lineEnd), data
// (lineWhole: CSV only), or what Postgres refuses or reads otherwise than
// as a plain end (lineBad). complete is false when more data is needed
// to tell.
func (s *Splitter) endMarker(start, at int, final bool) (st lineStatus, complete bool) {
	b := s.buf
	csv := s.o.Format == CSV
	after := at + 2
	if after == len(b) && !final || s.eol == eolCRNL && after+1 == len(b) && b[after] == '\r' && !final {
		return 0, false
	}
	var terminated bool
	switch {
	case after == len(b):
	case s.eol == eolCRNL:
		terminated = after+1 < len(b) && b[after] == '\r' && b[after+1] == '\n'
	case s.eol == eolNL:
		terminated = b[after] == '\n'
	case s.eol == eolCR:
		terminated = b[after] == '\r'
	default:
		terminated = b[after] == '\n' || b[after] == '\r'
	}
	switch {
	case terminated && at == start:
		return lineEnd, true
	case csv && (after == len(b) || b[after] != '\n' && b[after] != '\r'):
		// Not followed by a line ending: CSV data.
		return lineWhole, true
	}
	// Text: a marker after data ends the stream after that data (a row
	// the splitter cannot place), or Postgres refuses it; CSV: a marker
	// with another line ending than the stream's, which Postgres refuses.
	return lineBad, true
}

// textField returns field Key of a text-format line, unescaped, as
// CopyReadAttributesText reads it; ok is false when the line has fewer
// fields.
func (s *Splitter) textField(line []byte) (key []byte, null, ok bool) {
	field, start := 0, 0
	for i := 0; ; i++ {
		if i < len(line) && line[i] == '\\' {
			i++
			continue
		}
		if i < len(line) && line[i] != s.o.Delimiter {
			continue
		}
		end := min(i, len(line))
		if field == s.o.Key {
			raw := line[start:end]
			if string(raw) == s.o.Null {
				return nil, true, true
			}
			return s.unescape(raw), false, true
		}
		if i >= len(line) {
			return nil, false, false
		}
		field++
		start = i + 1
	}
}

// unescape decodes a text-format field's backslash sequences.
func (s *Splitter) unescape(raw []byte) []byte {
	out := s.scratch[:0]
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i == len(raw) {
			break
		}
		c = raw[i]
		switch {
		case c >= '0' && c <= '7':
			v := int(c - '0')
			for n := 0; n < 2 && i+1 < len(raw) && raw[i+1] >= '0' && raw[i+1] <= '7'; n++ {
				i++
				v = v*8 + int(raw[i]-'0')
			}
			c = byte(v & 0o377)
		case c == 'x' && i+1 < len(raw) && isHex(raw[i+1]):
			i++
			v := hexValue(raw[i])
			if i+1 < len(raw) && isHex(raw[i+1]) {
				i++
				v = v*16 + hexValue(raw[i])
			}
			c = v
		case c == 'b':
			c = '\b'
		case c == 'f':
			c = '\f'
		case c == 'n':
			c = '\n'
		case c == 'r':
			c = '\r'
		case c == 't':
			c = '\t'
		case c == 'v':
			c = '\v'
		}
		out = append(out, c)
	}
	s.scratch = out
	return out
}

func isHex(c byte) bool {
	return c >= '0' && c <= '9' || c >= 'a' && c <= 'f' || c >= 'A' && c <= 'F'
}

func hexValue(c byte) byte {
	switch {
	case c >= 'a':
		return c - 'a' + 10
	case c >= 'A':
		return c - 'A' + 10
	}
	return c - '0'
}

// csvField returns field Key of a CSV line, unquoted, as
// CopyReadAttributesCSV reads it, with FORCE_NULL and FORCE_NOT_NULL
// applied; ok is false when the line has fewer fields or an unterminated
// quote.
func (s *Splitter) csvField(line []byte) (key []byte, null, ok bool) {
	o := &s.o
	i := 0
	for field := 0; ; field++ {
		start := i
		out := s.scratch[:0]
		quoted, delimited := false, false
	unquoted:
		for i < len(line) {
			c := line[i]
			i++
			switch c {
			case o.Delimiter:
				delimited = true
				break unquoted
			case o.Quote:
				quoted = true
				for {
					if i >= len(line) {
						return nil, false, false
					}
					c := line[i]
					i++
					if c == o.Escape && i < len(line) && (line[i] == o.Escape || line[i] == o.Quote) {
						out = append(out, line[i])
						i++
						continue
					}
					if c == o.Quote {
						break
					}
					out = append(out, c)
				}
			default:
				out = append(out, c)
			}
		}
		s.scratch = out
		if field == o.Key {
			end := i
			if delimited {
				end--
			}
			raw := line[start:end]
			null := !quoted && string(raw) == o.Null
			if o.ForceNotNull {
				null = false
			}
			if o.ForceNull && string(out) == o.Null {
				null = true
			}
			if null {
				return nil, true, true
			}
			return out, false, true
		}
		if !delimited {
			return nil, false, false
		}
	}
}
