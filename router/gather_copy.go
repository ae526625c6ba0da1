package router

import (
	"context"
	"encoding/binary"
	"fmt"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/router/planner"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// A gather's pulls: each shard's binary COPY of a table's rows, passed
// on CopyData by CopyData into the computing backend's COPY FROM STDIN
// (gather.go).

// load fills t's temporary table from its shards.
func (g *gathering) load(ctx context.Context, t planner.GatherTable) bool {
	errMsg, res, err := g.run(queryMessage("COPY pg_temp." + t.Temp + " FROM STDIN (FORMAT binary)"))
	if !g.ok(errMsg, err) {
		return false
	}
	if !res.CopyIn {
		g.c.out = appendError(g.c.out, "ERROR", pgerr.New(pgerr.InternalError, "gathering %s: the computing shard did not start COPY", t.Table))
		g.c.failTx()
		return false
	}
	w := copyWriter{g: g, buf: appendCopyData(nil, binaryCopyHeader)}
	rows := int64(0)
	var lookups map[string]string
	if k := g.lookups[t.Temp]; k != nil && !k.over {
		lookups = k.pulls(t.Shards)
	}
	for _, shard := range t.Shards {
		sql := t.Pull
		if t.Lookup != nil && lookups != nil {
			if sql = lookups[shard]; sql == "" {
				continue // the shard owns none of the values
			}
		}
		n, ok := g.pull(ctx, shard, sql, g.sources[t.Temp], &w)
		if !ok {
			g.abortCopy()
			return false
		}
		rows += n
	}
	w.buf = appendCopyData(w.buf, binaryCopyTrailer)
	w.buf = append(w.buf, 'c', 0, 0, 0, 4)
	errMsg, _, err = g.run(w.buf)
	if !g.ok(errMsg, err) {
		return false
	}
	if rows >= analyzeRows {
		for _, ix := range t.Indexes {
			if !g.quiet(ix) {
				return false
			}
		}
		return g.quiet("ANALYZE pg_temp." + t.Temp)
	}
	return true
}

// abortCopy ends the computing backend's COPY after a failed pull; the
// client already has the statement's error.
func (g *gathering) abortCopy() {
	if g.broken {
		return
	}
	if _, _, err := g.run(appendCopyFail(nil, "tessera: a pull failed")); err != nil {
		g.broken = true
	}
}

// pull copies one shard's rows of a table, pulled by sql, into w and
// returns how many; keys collect the values lookups read from them.
func (g *gathering) pull(ctx context.Context, shard, sql string, keys []*lookupKeys, w *copyWriter) (int64, bool) {
	c := g.c
	b, err := c.session(ctx, shard, c.settings.replica())
	if err == nil {
		err = c.joinTx(ctx, b)
	}
	if err != nil {
		c.out = appendError(c.out, "ERROR", shardError(shard, err))
		c.failTx()
		return 0, false
	}
	var (
		rows      int64
		header    = true
		errMsg    []byte
		sendErr   error
		tooLarge  bool
		cancelled bool
	)
	q := queryMessage("COPY (" + sql + ") TO STDOUT (FORMAT binary)")
	res, err := c.run(b, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: q}, func(chunk []byte, _ bool) error {
		return backendMessages(chunk, func(typ byte, msg []byte) error {
			switch typ {
			case 'E':
				if errMsg == nil {
					errMsg = append([]byte(nil), msg...)
				}
			case 'd':
				if sendErr != nil || tooLarge {
					return nil // drained: the answer's end is still read
				}
				data := msg[5:]
				if header {
					header = false
					data = skipCopyHeader(data)
				}
				if len(data) == 0 || len(data) == 2 && data[0] == 0xff && data[1] == 0xff {
					return nil // the trailer: one is written for every shard
				}
				rows++
				g.pulled += int64(len(data))
				if g.pulled > g.limit {
					tooLarge = true
				} else {
					sendErr = w.write(data)
					for _, k := range keys {
						k.add(data)
					}
				}
				if (tooLarge || sendErr != nil) && !cancelled {
					cancelled = true
					// Stop the shard's COPY rather than read it all. The
					// shard's statement is the one running now (c.run),
					// so the cancel cannot reach a later one.
					c.cancelRunning()
				}
			}
			return nil
		})
	})
	if err != nil {
		c.out = appendError(c.out, "ERROR", shardError(shard, err))
		c.failTx()
		return 0, false
	}
	c.adoptStatus(shard, res.TxStatus)
	switch {
	case tooLarge:
		c.out = appendError(c.out, "ERROR", errGatherTooLarge(g.limit))
	case sendErr != nil:
		// Before the shard's error, which may be the cancel it caused.
		c.out = appendError(c.out, "ERROR", shardError(g.comp.shard, sendErr))
	case errMsg != nil:
		c.out = append(c.out, errMsg...)
	default:
		return rows, true
	}
	c.failTx()
	return 0, false
}

// skipCopyHeader removes the binary COPY header from the first data of
// a shard's answer.
func skipCopyHeader(data []byte) []byte {
	const fixed = 19 // signature (11), flags (4), extension length (4)
	if len(data) < fixed {
		return nil
	}
	ext := int(binary.BigEndian.Uint32(data[15:19]))
	if fixed+ext > len(data) {
		return nil
	}
	return data[fixed+ext:]
}

// copyWriter gathers CopyData messages for the computing backend and
// sends them on every copyBatch bytes.
type copyWriter struct {
	g   *gathering
	buf []byte
}

func (w *copyWriter) write(row []byte) error {
	w.buf = appendCopyData(w.buf, row)
	if len(w.buf) < copyBatch {
		return nil
	}
	errMsg, _, err := w.g.run(w.buf)
	w.buf = w.buf[:0]
	if err == nil && errMsg != nil {
		err = pgwire.ParseError(errMsg)
	}
	if err != nil {
		return fmt.Errorf("loading gathered rows: %w", err)
	}
	return nil
}

func appendCopyData(dst, data []byte) []byte {
	dst = append(dst, 'd')
	dst = binary.BigEndian.AppendUint32(dst, uint32(4+len(data)))
	return append(dst, data...)
}

func appendCopyFail(dst []byte, why string) []byte {
	dst = append(dst, 'f')
	dst = binary.BigEndian.AppendUint32(dst, uint32(4+len(why)+1))
	return append(append(dst, why...), 0)
}
