package router

import (
	"context"
	"encoding/binary"
	"fmt"
	"strconv"

	"github.com/tesseradb/tessera/router/planner"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// A SELECT ordered by integer output columns with a LIMIT n
// (planner.MergeOrdered) runs on every shard it reaches, each sorting and
// limiting its own rows; the router merges their rows by the same keys and
// passes on the first n. The rows themselves go through as the shards sent
// them: only the key columns are read.

// orderedRow is one row with its keys read.
type orderedRow struct {
	msg  []byte
	keys []*int64 // nil for NULL
}

// scatterOrdered runs r on each of its shards and answers with the merge.
func (c *clientConn) scatterOrdered(ctx context.Context, r *routed, frontend []byte, prepared []*pb.PreparedStatement) (bool, error) {
	formats := resultFormats(frontend)
	var first []byte
	perShard := make([][]orderedRow, len(r.shards))
	ok := c.eachShardAnswer(ctx, r, frontend, prepared, func(i int, answer []byte) (bool, error) {
		rows, failed, err := orderedRows(answer, r.order, formats)
		if i == 0 {
			first = answer
		}
		perShard[i] = rows
		return failed, err
	})
	if !ok {
		return true, nil
	}
	merged := mergeOrdered(perShard, r.order, r.limit)
	backendMessages(first, func(typ byte, msg []byte) error {
		switch typ {
		case 'D', 'Z':
		case 'C':
			for _, row := range merged {
				c.out = append(c.out, row.msg...)
			}
			c.out = appendCommandComplete(c.out, "SELECT "+strconv.Itoa(len(merged)))
		default:
			c.out = append(c.out, msg...)
		}
		return nil
	})
	return false, nil
}

// orderedRows reads a shard's rows with their keys, or reports that its
// answer is an error.
func orderedRows(answer []byte, order []planner.OrderKey, formats []int16) (rows []orderedRow, failed bool, err error) {
	walkErr := backendMessages(answer, func(typ byte, msg []byte) error {
		switch typ {
		case 'E':
			failed = true
		case 'D':
			values, err := dataRowValues(msg)
			if err != nil {
				return err
			}
			row := orderedRow{msg: msg, keys: make([]*int64, len(order))}
			for k, key := range order {
				if key.Column >= len(values) {
					return fmt.Errorf("a row of %d columns has no column %d", len(values), key.Column+1)
				}
				if v := values[key.Column]; v != nil {
					n, err := integerValue(v, formatOf(formats, key.Column))
					if err != nil {
						return err
					}
					row.keys[k] = &n
				}
			}
			rows = append(rows, row)
		}
		return nil
	})
	if failed {
		return nil, true, nil
	}
	return rows, false, walkErr
}

// integerValue reads an integer column's value: text, or binary int2,
// int4 or int8 by its length.
func integerValue(v []byte, format int16) (int64, error) {
	if format != 1 {
		return strconv.ParseInt(string(v), 10, 64)
	}
	switch len(v) {
	case 2:
		return int64(int16(binary.BigEndian.Uint16(v))), nil
	case 4:
		return int64(int32(binary.BigEndian.Uint32(v))), nil
	case 8:
		return int64(binary.BigEndian.Uint64(v)), nil
	}
	return 0, fmt.Errorf("a binary integer of %d bytes", len(v))
}

// mergeOrdered merges the shards' sorted rows and returns the first
// limit. Among rows with equal keys the earlier shard's come first.
func mergeOrdered(perShard [][]orderedRow, order []planner.OrderKey, limit int64) []orderedRow {
	var out []orderedRow
	next := make([]int, len(perShard))
	for int64(len(out)) < limit {
		best := -1
		for s, rows := range perShard {
			if next[s] >= len(rows) {
				continue
			}
			if best < 0 || less(rows[next[s]], perShard[best][next[best]], order) {
				best = s
			}
		}
		if best < 0 {
			break
		}
		out = append(out, perShard[best][next[best]])
		next[best]++
	}
	return out
}

// less reports whether a sorts before b under Postgres's rules: ASC puts
// NULLs last unless NULLS FIRST, DESC puts them first unless NULLS LAST.
func less(a, b orderedRow, order []planner.OrderKey) bool {
	for k, key := range order {
		x, y := a.keys[k], b.keys[k]
		switch {
		case x == nil && y == nil:
			continue
		case x == nil:
			return key.NullsFirst
		case y == nil:
			return !key.NullsFirst
		case *x == *y:
			continue
		case key.Desc:
			return *x > *y
		default:
			return *x < *y
		}
	}
	return false
}
