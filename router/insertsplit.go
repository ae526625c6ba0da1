package router

import (
	"context"
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/router/planner"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// A multi-row INSERT whose VALUES rows land on different shards runs as
// one INSERT per shard holding that shard's rows (planner.SplitInsert).
// Inside a transaction each shard joins it. Outside one, the router opens
// a transaction on every shard the INSERT reaches and commits them only
// once every shard's INSERT succeeded, rolling all back otherwise, so
// that a failure (a unique violation on the second shard, say) leaves
// nothing inserted, as one Postgres would; only a failure during the
// commits themselves could leave part of it, as with any transaction
// over several shards. The client gets one answer: the first shard's,
// with the RETURNING rows of every shard in the order of the VALUES rows
// and one CommandComplete counting them all.
//
// With the extended protocol each shard gets a statement of its own text,
// prepared by content name as named statements are, and a Bind with its
// subset of the parameters; the client's other messages (its Parse,
// Describe, Execute) go to every shard as they came. The split is made
// per Bind, from its parameter values.

// splitInsert is one execution of a split INSERT.
type splitInsert struct {
	plan *planner.InsertSplit
	// Extended protocol: each part's Bind and statement.
	portal   string
	bind     [][]byte
	prepared []*pb.PreparedStatement
}

// routeSplit makes r run st split by shard.
func (c *clientConn) routeSplit(r *routed, st *plannedStmt, params *bindParams) {
	sp, err := st.SplitInsert(params.planner())
	if err != nil {
		r.err = err
		return
	}
	r.split, r.mode = &splitInsert{plan: sp}, routeSplit
	r.shards = make([]string, len(sp.Parts))
	for i := range sp.Parts {
		r.shards[i] = sp.Parts[i].Shard
	}
}

// makeBinds builds each part's statement and Bind from the client's Bind
// of p: the part's parameters with their format codes (none: all text;
// one: it applies to all; else one per parameter), the result formats as
// sent.
func (s *splitInsert) makeBinds(portal string, p *prepared, params *bindParams) error {
	n := len(params.values)
	if want := max(s.plan.NumParams, len(p.oids)); n != want {
		return pgerr.New(pgerr.ProtocolViolation, "bind message supplies %d parameters, but prepared statement requires %d", n, want)
	}
	if params.nfmt > 1 && params.nfmt != n {
		return pgerr.New(pgerr.ProtocolViolation, "bind message has %d parameter formats but %d parameters", params.nfmt, n)
	}
	s.portal = portal
	s.bind = make([][]byte, len(s.plan.Parts))
	s.prepared = make([]*pb.PreparedStatement, len(s.plan.Parts))
	for i := range s.plan.Parts {
		part := &s.plan.Parts[i]
		oids := make([]uint32, len(part.Params))
		for j, old := range part.Params {
			if old <= len(p.oids) {
				oids[j] = p.oids[old-1]
			}
		}
		ps := &pb.PreparedStatement{Name: planner.StatementNameAt(part.SQL, oids, p.epoch), Query: part.SQL, ParamOids: oids}
		m := append([]byte{'B', 0, 0, 0, 0}, portal...)
		m = append(m, 0)
		m = append(m, ps.Name...)
		m = append(m, 0)
		switch {
		case params.nfmt == 0 || len(part.Params) == 0:
			m = binary.BigEndian.AppendUint16(m, 0)
		case params.nfmt == 1:
			m = binary.BigEndian.AppendUint16(m, 1)
			m = append(m, params.formats[:2]...)
		default:
			m = binary.BigEndian.AppendUint16(m, uint16(len(part.Params)))
			for _, old := range part.Params {
				m = append(m, params.formats[2*(old-1):2*old]...)
			}
		}
		m = binary.BigEndian.AppendUint16(m, uint16(len(part.Params)))
		for _, old := range part.Params {
			v := params.values[old-1]
			if v == nil {
				m = binary.BigEndian.AppendUint32(m, 0xffffffff)
				continue
			}
			m = binary.BigEndian.AppendUint32(m, uint32(len(v)))
			m = append(m, v...)
		}
		m = append(m, params.results...)
		binary.BigEndian.PutUint32(m[1:], uint32(len(m)-1))
		s.bind[i], s.prepared[i] = m, ps
	}
	return nil
}

// checkBatch accepts the extended-protocol messages of a split INSERT's
// segment: its Bind, then its Execute (without a row limit) last, with
// Parse, Describe or Close around them.
func (s *splitInsert) checkBatch(frontend []byte) error {
	refuse := pgerr.New(pgerr.FeatureNotSupported, "a multi-row INSERT across shards must be bound and executed (without a row limit) in one batch")
	if s.bind == nil {
		return refuse
	}
	return checkBoundSegment(frontend, s.portal, true, refuse)
}

// checkBoundSegment accepts a segment the router runs as its own
// statements in place of the client's Bind and Execute (a split INSERT, a
// key move): one Bind, and last one Execute of portal without a row
// limit, with Parse, Close and a Describe of the portal (of the statement
// too, when describeStatement) around them; else refuse.
func checkBoundSegment(frontend []byte, portal string, describeStatement bool, refuse error) error {
	binds, execs := 0, 0
	last := byte(0)
	err := backendMessages(frontend, func(typ byte, msg []byte) error {
		switch typ {
		case 'B':
			binds++
		case 'E':
			execs++
			name, off, err := cstring(msg, 5)
			if err != nil || name != portal || off+4 != len(msg) || binary.BigEndian.Uint32(msg[off:]) != 0 {
				return refuse
			}
		case 'D':
			if !describeStatement && (len(msg) < 6 || msg[5] != 'P') {
				return refuse
			}
		case 'S':
			return nil
		case 'P', 'C':
		default:
			return refuse
		}
		last = typ
		return nil
	})
	if err != nil || binds != 1 || execs != 1 || last != 'E' {
		return refuse
	}
	return nil
}

// frontendFor is the client's messages with part i's Bind in place of
// the client's.
func (s *splitInsert) frontendFor(i int, frontend []byte) []byte {
	out := make([]byte, 0, len(frontend)+len(s.bind[i]))
	backendMessages(frontend, func(typ byte, msg []byte) error {
		if typ == 'B' {
			out = append(out, s.bind[i]...)
		} else {
			out = append(out, msg...)
		}
		return nil
	})
	return out
}

// splitInsert runs a split INSERT (routeSplit) on each part's shard in
// turn and answers as one statement.
func (c *clientConn) splitInsert(ctx context.Context, r *routed, frontend []byte, prepared []*pb.PreparedStatement) (bool, error) {
	s := r.split
	parts := s.plan.Parts
	extended := len(frontend) > 0 && frontend[0] != 'Q'
	fail := func(err error) (bool, error) {
		c.out = appendError(c.out, "ERROR", err)
		c.failTx()
		return true, nil
	}
	if extended {
		if err := s.checkBatch(frontend); err != nil {
			return fail(err)
		}
	}
	// implicit: the router's own transaction around the parts.
	implicit := !c.tx.active
	if implicit {
		saved := c.settings
		c.tx = txState{active: true, begin: "BEGIN", settings: &saved, replica: c.settings.replica()}
		fail = func(err error) (bool, error) {
			c.endImplicit(false)
			c.out = appendError(c.out, "ERROR", err)
			return true, nil
		}
	}
	answers := make([][]byte, len(parts))
	for i := range parts {
		shard := parts[i].Shard
		fe, prep := queryMessage(parts[i].SQL), []*pb.PreparedStatement(nil)
		if extended {
			fe = s.frontendFor(i, frontend)
			prep = append(append(prep, prepared...), s.prepared[i])
		}
		answer, err := c.answerOf(ctx, shard, true, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: fe, Prepared: prep}, 0)
		if err != nil {
			return fail(shardError(shard, err))
		}
		failed := false
		backendMessages(answer, func(typ byte, _ []byte) error {
			failed = failed || typ == 'E'
			return nil
		})
		if failed {
			// This shard's answer, error included, is the statement's.
			if implicit {
				c.endImplicit(false)
			}
			backendMessages(answer, func(typ byte, msg []byte) error {
				if typ != 'D' && typ != 'Z' {
					c.out = append(c.out, msg...)
				}
				return nil
			})
			return true, nil
		}
		answers[i] = answer
	}

	rows := make([][][]byte, len(parts))
	var total int64
	var notices []byte
	for i, answer := range answers {
		backendMessages(answer, func(typ byte, msg []byte) error {
			switch typ {
			case 'D':
				rows[i] = append(rows[i], msg)
			case 'C':
				_, n := splitTag(string(msg[5 : len(msg)-1]))
				total += n
			case 'N':
				if i > 0 {
					notices = append(notices, msg...)
				}
			}
			return nil
		})
	}
	if s.plan.Returning {
		for i := range parts {
			if len(rows[i]) != len(parts[i].Rows) {
				// A trigger skipped rows: which ones is unknown, so the
				// rows cannot be put in VALUES order.
				return fail(pgerr.New(pgerr.FeatureNotSupported,
					"multi-row INSERT across shards: shard %s returned %d rows for its %d VALUES rows, so RETURNING cannot keep the VALUES order",
					parts[i].Shard, len(rows[i]), len(parts[i].Rows)))
			}
		}
	}
	if implicit {
		if err := c.endImplicit(true); err != nil {
			c.out = appendError(c.out, "ERROR", err)
			return true, nil
		}
	}
	done := false
	finish := func() {
		c.out = append(c.out, notices...)
		next := make([]int, len(parts))
		for _, at := range s.plan.RowPart {
			if next[at] < len(rows[at]) {
				c.out = append(c.out, rows[at][next[at]]...)
				next[at]++
			}
		}
		c.out = appendCommandComplete(c.out, "INSERT 0 "+strconv.FormatInt(total, 10))
		done = true
	}
	backendMessages(answers[0], func(typ byte, msg []byte) error {
		switch typ {
		case 'D', 'Z':
		case 'C':
			if !done {
				finish()
			}
		default:
			c.out = append(c.out, msg...)
		}
		return nil
	})
	if !done {
		finish()
	}
	return false, nil
}

// endImplicit commits or rolls back the transaction the router opened
// around a split INSERT (or a scatter write) on every shard it reached,
// and forgets it. Over several shards the commit is atomic unless
// tessera.commit is best_effort, which stops at the first shard that
// fails, naming those already committed.
func (c *clientConn) endImplicit(commit bool) error {
	if commit && c.settings.atomicCommit() && len(c.tx.shards) > 1 {
		// Every shard it reached wrote: an atomic commit (atomic.go).
		c.tx.wrote = c.tx.shards
		warning, err := c.commitAtomicSimple(context.Background())
		c.tx = txState{}
		if warning != "" {
			c.out = appendWarning(c.out, warning)
		}
		return err
	}
	sql := "ROLLBACK"
	if commit {
		sql = "COMMIT"
	}
	q := queryMessage(sql)
	shards := c.tx.shards
	c.tx = txState{}
	var done []string
	for _, shard := range shards {
		b, err := c.session(context.Background(), shard, false)
		if err == nil {
			var res sidecar.Result
			res, _, err = c.quiet(b, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: q})
			if err == nil && res.TxStatus != pb.TxStatus_IDLE {
				err = pgerr.New(pgerr.InternalError, "shard %s is still in a transaction after %s", shard, sql)
			}
		}
		if err != nil && commit {
			if len(done) > 0 {
				return pgerr.New(pgerr.Code(err), "shard %s: %v (shards %s already committed; a commit over several shards is not atomic)", shard, err, strings.Join(done, ", "))
			}
			// Nothing committed yet: roll the rest back.
			for _, other := range shards {
				if other != shard {
					if b, err := c.session(context.Background(), other, false); err == nil {
						c.quiet(b, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: queryMessage("ROLLBACK")})
					}
				}
			}
			return shardError(shard, err)
		}
		done = append(done, shard)
	}
	return nil
}
