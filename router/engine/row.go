package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/tesseradb/tessera/pgwire"
)

// Row is one DataRow: the message as a shard sent it (type byte, length
// and body) and its column values, nil for NULL, pointing into Msg.
type Row struct {
	Msg    []byte
	Values [][]byte
}

// Operator produces a stream of rows. Next returns the next row, or false
// at the end; after an error the operator is done.
type Operator interface {
	Next() (Row, bool, error)
}

// ParseDataRow splits a DataRow message (type byte 'D', length, body)
// into its column values.
func ParseDataRow(msg []byte) (Row, error) {
	values := pgwire.DataRowValues(msg)
	if values == nil {
		return Row{}, fmt.Errorf("not a whole DataRow")
	}
	return Row{Msg: msg, Values: values}, nil
}

// encodeDataRow builds a DataRow message of values (nil for NULL).
func encodeDataRow(values [][]byte) []byte {
	size := 4 + 2
	for _, v := range values {
		size += 4 + len(v)
	}
	msg := make([]byte, 0, 1+size)
	msg = append(msg, 'D')
	msg = binary.BigEndian.AppendUint32(msg, uint32(size))
	msg = binary.BigEndian.AppendUint16(msg, uint16(len(values)))
	for _, v := range values {
		if v == nil {
			msg = binary.BigEndian.AppendUint32(msg, 0xFFFFFFFF)
			continue
		}
		msg = binary.BigEndian.AppendUint32(msg, uint32(len(v)))
		msg = append(msg, v...)
	}
	return msg
}

// Source is one shard's rows, in the order it sent them.
type Source struct {
	rows [][]byte
	next int
}

// NewSource returns the rows of DataRow messages.
func NewSource(dataRows [][]byte) *Source { return &Source{rows: dataRows} }

func (s *Source) Next() (Row, bool, error) {
	if s.next >= len(s.rows) {
		return Row{}, false, nil
	}
	msg := s.rows[s.next]
	s.next++
	r, err := ParseDataRow(msg)
	return r, err == nil, err
}

// Concat passes on its inputs' rows, one input after another.
type Concat struct {
	inputs []Operator
}

func NewConcat(inputs ...Operator) *Concat { return &Concat{inputs: inputs} }

func (c *Concat) Next() (Row, bool, error) {
	for len(c.inputs) > 0 {
		r, ok, err := c.inputs[0].Next()
		if err != nil || ok {
			return r, ok, err
		}
		c.inputs = c.inputs[1:]
	}
	return Row{}, false, nil
}

// Limit skips Offset rows and passes on at most Count (all when Count is
// negative).
type Limit struct {
	input         Operator
	offset, count int64
}

func NewLimit(input Operator, offset, count int64) *Limit {
	return &Limit{input: input, offset: offset, count: count}
}

func (l *Limit) Next() (Row, bool, error) {
	for l.offset > 0 {
		_, ok, err := l.input.Next()
		if err != nil || !ok {
			return Row{}, false, err
		}
		l.offset--
	}
	if l.count == 0 {
		return Row{}, false, nil
	}
	r, ok, err := l.input.Next()
	if ok && l.count > 0 {
		l.count--
	}
	return r, ok, err
}

// Drain runs op to its end, passing each row to emit.
func Drain(op Operator, emit func(Row)) error {
	for {
		r, ok, err := op.Next()
		if err != nil {
			return err
		}
		if !ok {
			return nil
		}
		emit(r)
	}
}
