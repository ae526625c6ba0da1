package router

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// A SELECT whose every output column is a count (planner.MergeCounts)
// runs on every shard it reaches; each answers one row of counts, and the
// client gets one row of their sums, which is exactly the count over all
// the data. Counts are int8 (bigint): text or 8-byte binary, as the
// client's Bind asked.

// scatterCounts runs r on each of its shards and answers with the sums.
func (c *clientConn) scatterCounts(ctx context.Context, r *routed, frontend []byte, prepared []*pb.PreparedStatement) (bool, error) {
	formats := resultFormats(frontend)
	var first []byte // the first shard's answer: its messages frame ours
	var sums []int64
	ok := c.eachShardAnswer(ctx, r, frontend, prepared, func(i int, answer []byte) (bool, error) {
		row, failed, err := countsRow(answer, formats)
		if failed || err != nil {
			return failed, err
		}
		if i == 0 {
			first, sums = answer, row
			return false, nil
		}
		if len(row) != len(sums) {
			return false, fmt.Errorf("answered %d counts, shard %s %d", len(row), r.shards[0], len(sums))
		}
		for j := range sums {
			sums[j] += row[j]
		}
		return false, nil
	})
	if !ok {
		return true, nil
	}
	backendMessages(first, func(typ byte, msg []byte) error {
		switch typ {
		case 'D':
			c.out = appendCountsRow(c.out, sums, formats)
		case 'Z':
		default:
			c.out = append(c.out, msg...)
		}
		return nil
	})
	return false, nil
}

// countsRow reads the one DataRow of a shard's answer as integers, or
// reports that the answer is an error.
func countsRow(answer []byte, formats []int16) (row []int64, failed bool, err error) {
	rows := 0
	walkErr := backendMessages(answer, func(typ byte, msg []byte) error {
		switch typ {
		case 'E':
			failed = true
		case 'D':
			rows++
			values, err := dataRowValues(msg)
			if err != nil {
				return err
			}
			row = make([]int64, len(values))
			for i, v := range values {
				if row[i], err = countValue(v, formatOf(formats, i)); err != nil {
					return err
				}
			}
		}
		return nil
	})
	switch {
	case failed:
		return nil, true, nil
	case walkErr != nil:
		return nil, false, walkErr
	case rows != 1:
		return nil, false, fmt.Errorf("a count answered %d rows", rows)
	}
	return row, false, nil
}

// dataRowValues splits a DataRow into its column values (nil for NULL).
func dataRowValues(msg []byte) ([][]byte, error) {
	if len(msg) < 7 {
		return nil, fmt.Errorf("short DataRow")
	}
	n := int(binary.BigEndian.Uint16(msg[5:]))
	b := msg[7:]
	out := make([][]byte, n)
	for i := range out {
		if len(b) < 4 {
			return nil, fmt.Errorf("truncated DataRow")
		}
		size := int(int32(binary.BigEndian.Uint32(b)))
		b = b[4:]
		if size < 0 {
			continue
		}
		if size > len(b) {
			return nil, fmt.Errorf("truncated DataRow")
		}
		out[i], b = b[:size], b[size:]
	}
	return out, nil
}

func countValue(v []byte, format int16) (int64, error) {
	if v == nil {
		return 0, fmt.Errorf("a count is NULL")
	}
	if format == 1 {
		if len(v) != 8 {
			return 0, fmt.Errorf("a binary count of %d bytes", len(v))
		}
		return int64(binary.BigEndian.Uint64(v)), nil
	}
	return strconv.ParseInt(string(v), 10, 64)
}

func appendCountsRow(dst []byte, sums []int64, formats []int16) []byte {
	body := binary.BigEndian.AppendUint16(nil, uint16(len(sums)))
	for i, n := range sums {
		if formatOf(formats, i) == 1 {
			body = binary.BigEndian.AppendUint32(body, 8)
			body = binary.BigEndian.AppendUint64(body, uint64(n))
			continue
		}
		s := strconv.FormatInt(n, 10)
		body = binary.BigEndian.AppendUint32(body, uint32(len(s)))
		body = append(body, s...)
	}
	return appendMsg(dst, 'D', body)
}

// formatOf is column i's format under a Bind's result-format codes: none
// means text, one applies to every column.
func formatOf(formats []int16, i int) int16 {
	switch {
	case len(formats) == 0:
		return 0
	case len(formats) == 1:
		return formats[0]
	case i < len(formats):
		return formats[i]
	}
	return 0
}

// resultFormats returns the result-format codes of the Bind in an
// extended-protocol batch; a simple Query has none (text).
func resultFormats(frontend []byte) []int16 {
	var out []int16
	backendMessages(frontend, func(typ byte, msg []byte) error {
		if typ != 'B' {
			return nil
		}
		_, off, err := cstring(msg, 5) // portal
		if err == nil {
			_, off, err = cstring(msg, off) // statement
		}
		if err != nil || off+2 > len(msg) {
			return nil
		}
		n := int(binary.BigEndian.Uint16(msg[off:]))
		off += 2 + 2*n // parameter formats
		if off+2 > len(msg) {
			return nil
		}
		np := int(binary.BigEndian.Uint16(msg[off:]))
		off += 2
		for range np {
			if off+4 > len(msg) {
				return nil
			}
			size := int(int32(binary.BigEndian.Uint32(msg[off:])))
			off += 4
			if size > 0 {
				off += size
			}
		}
		if off+2 > len(msg) {
			return nil
		}
		nr := int(binary.BigEndian.Uint16(msg[off:]))
		off += 2
		for i := 0; i < nr && off+2 <= len(msg); i++ {
			out = append(out, int16(binary.BigEndian.Uint16(msg[off:])))
			off += 2
		}
		return nil
	})
	return out
}
