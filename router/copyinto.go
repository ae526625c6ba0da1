package router

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/router/copysplit"
	"github.com/tesseradb/tessera/router/planner"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// COPY ... FROM STDIN into a sharded table (planner.CopyInto): the COPY
// opens on every shard of the table's group, in the client's transaction
// or, outside one, in a transaction of the router's own; the client's
// rows are split by shard key as they stream (package copysplit), each
// shard's gathered into CopyData messages of up to copyBatch bytes; at
// CopyDone every shard ends its COPY, and the router's transaction commits
// them together (atomically under tessera.commit = atomic). Any shard's
// error, or a row that cannot be placed, fails the whole COPY, and the
// router's transaction rolls every shard back. The client sees one COPY:
// the first shard's CopyInResponse and one CommandComplete counting every
// shard's rows.
//
// A row the splitter cannot place (copysplit.Misfit), or whose key is
// NULL or cannot be routed, goes to the first shard, whose Postgres then
// reports the error one Postgres would report for it (a missing column,
// an invalid value, a NOT NULL key). If Postgres accepts such a row
// instead, the COPY fails: 23502 for a NULL key (as a split INSERT), 0A000
// for a value the router cannot route.

// copyInto is a COPY split by shard, under way.
type copyInto struct {
	plan     *planner.CopyInto
	split    *copysplit.Splitter
	format   shardfunc.Format
	shards   []string
	index    map[string]int
	sessions []*backendSession
	// pending is each shard's CopyData message being filled: its header,
	// then rows.
	pending  [][]byte
	implicit bool
	extended bool
	mode     pb.Mode
	// nullKeys and unroutable count rows sent to the first shard because
	// their key is NULL or cannot be routed; misfits, data the splitter
	// could not read. Each fails the COPY unless Postgres refuses it.
	nullKeys, unroutable, misfits int64
}

var copyDataHeader = []byte{'d', 0, 0, 0, 0}

// startCopyInto opens the COPY on every target shard and answers the
// client with the first shard's CopyInResponse.
func (c *clientConn) startCopyInto(ctx context.Context, r *routed, frontend []byte, prepared []*pb.PreparedStatement) (bool, error) {
	ci := &copyInto{
		plan: r.copyInto, split: copysplit.New(r.copyInto.Options), shards: r.shards,
		index: make(map[string]int, len(r.shards)), sessions: make([]*backendSession, len(r.shards)),
		pending: make([][]byte, len(r.shards)), implicit: !c.tx.active,
		extended: len(frontend) > 0 && frontend[0] != 'Q', mode: pb.Mode_STATEMENT,
	}
	if r.copyInto.Options.Format == copysplit.Binary {
		ci.format = shardfunc.BinaryFormat
	}
	if c.sessionPinned {
		ci.mode = pb.Mode_SESSION
	}
	for i, s := range r.shards {
		ci.index[s] = i
		ci.pending[i] = append([]byte(nil), copyDataHeader...)
	}
	if enc, ok := c.settings.get("client_encoding"); ok && !isUTF8(enc) {
		// Postgres converts the data before it reads it; the router
		// would hash the key's bytes as sent.
		c.out = appendError(c.out, "ERROR", pgerr.New(pgerr.FeatureNotSupported,
			"COPY into sharded table %s with client_encoding %s is not supported: use UTF8", ci.plan.Table, enc))
		c.failTx()
		return true, nil
	}
	if ci.implicit {
		saved := c.settings
		c.tx = txState{active: true, begin: "BEGIN", settings: &saved}
	}
	var first, refused []byte // the first shard's answer; a refusal
	var failure error
	for i, shard := range r.shards {
		b, err := c.session(ctx, shard, false)
		if err == nil {
			err = c.joinTx(ctx, b)
		}
		if err == nil && b.inst.diskLow() {
			err = errLowDisk(shard)
		}
		var answer []byte
		if err == nil {
			var res sidecar.Result
			res, err = c.run(b, &pb.Batch{Mode: ci.mode, Frontend: frontend, Prepared: prepared}, func(chunk []byte, _ bool) error {
				answer = append(answer, chunk...)
				return nil
			})
			if err == nil && !res.CopyIn {
				c.adoptStatus(shard, res.TxStatus)
				refused = answer
				break
			}
		}
		if err != nil {
			failure = shardError(shard, err)
			break
		}
		ci.sessions[i] = b
		if i == 0 {
			first = answer
		}
	}
	if failure == nil && refused == nil {
		failure = ci.plan.OptionsErr
		if failure == nil && copyInColumns(first) != ci.plan.Options.Columns {
			failure = pgerr.New(pgerr.FeatureNotSupported,
				"COPY into sharded table %s without a column list fills %d columns, not the %d the router knows (generated columns?): list the columns",
				ci.plan.Table, copyInColumns(first), ci.plan.Options.Columns)
		}
	}
	if failure != nil || refused != nil {
		ci.finish(c, nil, []byte("COPY into a sharded table was not started"))
		backendMessages(refused, func(typ byte, msg []byte) error {
			if typ != 'Z' {
				c.out = append(c.out, msg...)
			}
			return nil
		})
		if failure != nil {
			c.out = appendError(c.out, "ERROR", failure)
		}
		ci.endTx(c, false)
		return true, nil
	}
	c.out = append(c.out, first...)
	c.copyIn, c.copyInto = ci.sessions[0], ci
	return false, nil
}

// isUTF8 reports whether an encoding name is UTF8's, as Postgres spells
// it loosely (utf8, UTF-8, unicode).
func isUTF8(name string) bool {
	n := strings.ToLower(strings.NewReplacer("-", "", "_", "", "'", "", " ", "").Replace(name))
	return n == "utf8" || n == "unicode"
}

// copyInColumns is the number of columns a CopyInResponse announces, or
// -1.
func copyInColumns(answer []byte) int {
	n := -1
	backendMessages(answer, func(typ byte, msg []byte) error {
		if typ == 'G' && len(msg) >= 8 {
			n = int(binary.BigEndian.Uint16(msg[6:]))
		}
		return nil
	})
	return n
}

// copyIntoMessage serves a client message during a split COPY, as
// copyMessage does for a COPY on one shard.
func (c *clientConn) copyIntoMessage(typ byte, msg []byte) error {
	ci := c.copyInto
	switch typ {
	case 'd':
		if c.copyEnded {
			return nil // after CopyDone: dropped, as Postgres drops it
		}
		if err := ci.split.Write(msg[5:], func(p copysplit.Piece) error { return ci.place(c, p) }); err != nil {
			return c.endCopyInto(nil, err)
		}
		return nil
	case 'c', 'f':
		if ci.extended {
			// Ended by the client's Sync, as copyMessage does.
			c.copyEnded = true
			if typ == 'f' {
				c.copyBuf = append(c.copyBuf[:0], msg...)
			}
			return nil
		}
		if typ == 'f' {
			return c.endCopyInto(msg, nil)
		}
		return c.endCopyInto(nil, nil)
	case 'S':
		if ci.extended && c.copyEnded {
			var fail []byte
			if len(c.copyBuf) > 0 {
				fail = append([]byte(nil), c.copyBuf...)
				c.copyBuf = c.copyBuf[:0]
			}
			return c.endCopyInto(fail, nil)
		}
		return nil
	case 'H':
		return nil
	}
	// Anything else aborts the COPY, as in Postgres.
	return c.endCopyInto(copyFailMessage(""), nil)
}

func copyFailMessage(reason string) []byte {
	return appendMsg(nil, 'f', append([]byte(reason), 0))
}

// place adds a piece of the stream to the shards it goes to.
func (ci *copyInto) place(c *clientConn, p copysplit.Piece) error {
	switch p.Kind {
	case copysplit.Preamble, copysplit.Trailer:
		for i := range ci.shards {
			if err := ci.add(c, i, p.Data); err != nil {
				return err
			}
		}
		return nil
	case copysplit.Misfit:
		ci.misfits++
		return ci.add(c, 0, p.Data)
	}
	if p.Null {
		ci.nullKeys++
		return ci.add(c, 0, p.Data)
	}
	_, shard, err := ci.plan.Placement.Route(ci.plan.KeyType, ci.format, p.Key)
	at, ok := ci.index[shard]
	if err != nil || !ok {
		ci.unroutable++
		return ci.add(c, 0, p.Data)
	}
	return ci.add(c, at, p.Data)
}

// add appends data to shard i's CopyData message and sends it once it
// holds copyBatch bytes.
func (ci *copyInto) add(c *clientConn, i int, data []byte) error {
	ci.pending[i] = append(ci.pending[i], data...)
	if len(ci.pending[i]) < copyBatch {
		return nil
	}
	m := ci.pending[i]
	binary.BigEndian.PutUint32(m[1:], uint32(len(m)-1))
	_, err := c.run(ci.sessions[i], &pb.Batch{Mode: ci.mode, Frontend: m}, func([]byte, bool) error { return nil })
	ci.pending[i] = append(m[:0], copyDataHeader...)
	if err != nil {
		ci.sessions[i] = nil
		return shardError(ci.shards[i], err)
	}
	return nil
}

// endCopyInto ends the split COPY: with CopyDone (fail and failure nil),
// with the client's CopyFail message fail, or after the router's own
// failure. It answers the client and ends the router's transaction.
func (c *clientConn) endCopyInto(fail []byte, failure error) error {
	ci := c.copyInto
	c.copyIn, c.copyInto, c.copyExtended, c.copyEnded = nil, nil, false, false
	if fail == nil && failure == nil {
		failure = ci.split.End(func(p copysplit.Piece) error { return ci.place(c, p) })
	}
	if failure != nil && fail == nil {
		fail = copyFailMessage("COPY into a sharded table failed")
	}
	total, errMsg, notices, lost := ci.finish(c, fail, nil)
	c.out = append(c.out, notices...)
	switch {
	case failure != nil:
	case lost != nil:
		failure = lost
	case errMsg != nil:
	case ci.nullKeys > 0:
		failure = &pgerr.Error{Code: "23502", Message: "null value in shard key column \"" + ci.plan.Placement.ShardColumn() + "\" cannot be routed"}
	case ci.unroutable > 0 || ci.misfits > 0:
		failure = pgerr.New(pgerr.FeatureNotSupported,
			"COPY into sharded table %s: %d rows could not be placed on a shard (a shard-key value of column %s the router cannot route: write dates and times in ISO 8601 with a UTC offset)",
			ci.plan.Table, ci.unroutable+ci.misfits, ci.plan.Placement.ShardColumn())
	}
	switch {
	case errMsg != nil:
		c.out = append(c.out, errMsg...)
		ci.endTx(c, false)
	case failure != nil:
		c.out = appendError(c.out, "ERROR", failure)
		ci.endTx(c, false)
	default:
		if err := ci.endTx(c, true); err != nil {
			c.out = appendError(c.out, "ERROR", err)
		} else {
			c.out = appendCommandComplete(c.out, "COPY "+strconv.FormatInt(total, 10))
		}
	}
	c.out = appendReady(c.out, c.status())
	return nil
}

// finish ends the COPY on every shard where it is open, with CopyDone
// and the rows still pending, or with the CopyFail message fail (or one
// saying reason). It returns the rows the shards stored, the first
// shard's error message, their notices, and the failure to reach one.
func (ci *copyInto) finish(c *clientConn, fail, reason []byte) (total int64, errMsg, notices []byte, lost error) {
	if fail == nil && reason != nil {
		fail = copyFailMessage(string(reason))
	}
	for i, b := range ci.sessions {
		if b == nil {
			continue
		}
		var fe []byte
		if fail == nil {
			fe = ci.pending[i]
			if len(fe) > len(copyDataHeader) {
				binary.BigEndian.PutUint32(fe[1:], uint32(len(fe)-1))
			} else {
				fe = fe[:0]
			}
			fe = append(fe, 'c', 0, 0, 0, 4)
		} else {
			fe = append([]byte(nil), fail...)
		}
		if ci.extended {
			fe = append(fe, 'S', 0, 0, 0, 4)
		}
		res, err := c.run(b, &pb.Batch{Mode: ci.mode, Frontend: fe}, func(chunk []byte, _ bool) error {
			return backendMessages(chunk, func(typ byte, msg []byte) error {
				switch typ {
				case 'E':
					if errMsg == nil {
						errMsg = append([]byte(nil), msg...)
					}
				case 'N':
					notices = append(notices, msg...)
				case 'C':
					_, n := splitTag(string(msg[5 : len(msg)-1]))
					total += n
				}
				return nil
			})
		})
		if err != nil {
			if lost == nil {
				lost = shardError(ci.shards[i], err)
			}
			continue
		}
		c.adoptStatus(ci.shards[i], res.TxStatus)
	}
	return total, errMsg, notices, lost
}

// endTx commits or rolls back the router's own transaction around the
// COPY; in the client's transaction, a failure fails it.
func (ci *copyInto) endTx(c *clientConn, commit bool) error {
	if !ci.implicit {
		if !commit {
			c.failTx()
		}
		return nil
	}
	if len(c.tx.shards) == 0 {
		c.tx = txState{}
		return nil
	}
	return c.endImplicit(commit)
}
