package router

import (
	"errors"
	"strconv"
	"strings"

	"github.com/tesseradb/tessera/pgwire"
)

// errStopWalk ends a walk over messages early.
var errStopWalk = errors.New("stop")

// forwarder passes a single shard's answer to the client untouched, except
// for the final ReadyForQuery, which the router writes itself because the
// client's transaction status may span several shards. Chunks go out as
// they come; the last, which holds that ReadyForQuery, waits for finish.
type forwarder struct {
	c *clientConn
	// held is the answer's last chunk (valid until the session's next
	// batch), nil before it arrives.
	held    []byte
	written bool // a chunk went to the client
	err     error
	scan    bool // look at message types (only when the caller needs them)
	failed  bool // an ErrorResponse was seen (with scan)
	// auto: the answer of an auto-prepared read, whose first chunk
	// starts with a BindComplete the client must not see.
	auto bool
}

func (f *forwarder) emit(chunk []byte, last bool) error {
	if f.auto {
		chunk, f.auto = dropBindComplete(chunk), false
	}
	if f.scan {
		backendMessages(chunk, func(typ byte, _ []byte) error {
			if typ == 'E' {
				f.failed = true
			}
			return nil
		})
	}
	if last {
		f.held = chunk
		return nil
	}
	f.written = true
	if err := f.c.write(chunk); err != nil {
		f.err = err
		return err
	}
	return nil
}

// unwritten reports whether the whole answer is still held: nothing has
// gone to the client yet.
func (f *forwarder) unwritten() bool { return !f.written }

// firstErrorCode returns the SQLSTATE of the answer's first message when
// that message, past the acknowledgements of Parse and Bind, is an
// ErrorResponse; otherwise "". Such an answer proves nothing ran.
func firstErrorCode(answer []byte) string {
	code := ""
	backendMessages(answer, func(typ byte, msg []byte) error {
		switch typ {
		case '1', '2': // ParseComplete, BindComplete
			return nil
		case 'E':
			code = pgwire.ParseError(msg).Code
		}
		return errStopWalk
	})
	return code
}

// finish writes the last chunk without its ReadyForQuery (absent when the
// batch ended waiting for COPY data).
func (f *forwarder) finish(copyIn bool) error {
	last := f.held
	f.held = nil
	if !copyIn && len(last) >= 6 && last[len(last)-6] == 'Z' {
		last = last[:len(last)-6]
	}
	if len(last) == 0 {
		return nil
	}
	return f.c.write(last)
}

// merger combines the answers of one statement run on several shards:
// the first RowDescription, every DataRow as it arrives, and one
// CommandComplete whose row count is the sum of the shards'. The first
// error ends the statement.
type merger struct {
	c       *clientConn
	later   bool // past the first shard: only rows, notices and errors pass
	tagVerb string
	rows    int64
	failed  bool
	pending []byte
	// limit, when not negative, caps the rows passed on (a LIMIT without
	// ORDER BY: any n rows answer it); sent counts them.
	limit int64
	sent  int64
}

// full reports whether a LIMIT's rows are all passed on.
func (m *merger) full() bool { return m.limit >= 0 && m.sent >= m.limit }

// next moves on to the next shard's answer.
func (m *merger) next() { m.later = true }

func (m *merger) emit(chunk []byte, _ bool) error {
	if m.failed {
		return nil
	}
	out := m.pending[:0]
	err := backendMessages(chunk, func(typ byte, msg []byte) error {
		if m.later && typ != 'D' && typ != 'E' && typ != 'N' && typ != 'C' {
			return nil
		}
		switch typ {
		case 'D':
			if m.full() {
				return nil
			}
			m.sent++
		case 'C':
			verb, n := splitTag(string(msg[5 : len(msg)-1]))
			m.tagVerb = verb
			m.rows += n
			return nil
		case 'Z', 'I':
			return nil
		case 'E':
			m.failed = true
		}
		out = append(out, msg...)
		return nil
	})
	m.pending = out
	if err != nil {
		return err
	}
	return m.c.write(out)
}

// tag returns the combined CommandComplete tag.
func (m *merger) tag() string {
	if m.limit >= 0 {
		m.rows = m.sent
	}
	switch m.tagVerb {
	case "INSERT":
		return "INSERT 0 " + strconv.FormatInt(m.rows, 10)
	case "":
		return ""
	}
	return m.tagVerb + " " + strconv.FormatInt(m.rows, 10)
}

// splitTag splits "SELECT 5", "UPDATE 3", "INSERT 0 2" into verb and count.
func splitTag(tag string) (string, int64) {
	i := strings.LastIndexByte(tag, ' ')
	if i < 0 {
		return tag, 0
	}
	n, err := strconv.ParseInt(tag[i+1:], 10, 64)
	if err != nil {
		return tag, 0
	}
	verb := tag[:i]
	if strings.HasPrefix(verb, "INSERT ") {
		verb = "INSERT"
	}
	return verb, n
}
