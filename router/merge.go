package router

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/router/engine"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// A read whose answers several shards must combine beyond concatenation
// (planner.MergeEngine: counts, aggregates by group, DISTINCT, ORDER BY
// with a LIMIT) runs as written on every shard it reaches; the router
// runs the statement's engine plan (package engine) over their rows. The
// first shard's answer frames the result: its ParseComplete, BindComplete
// and RowDescription go through, then the engine's rows and a
// CommandComplete counting them.

// errEngineRebind: an engine plan whose shards run other SQL, reached
// without a Query or a Bind to carry it (not expected).
var errEngineRebind = pgerr.New(pgerr.InternalError, "a merge across shards found no Bind to give the shards' SQL")

// rebind returns frontend with each Bind naming statement instead of the
// client's; the rest of each message is kept.
func rebind(frontend []byte, statement string) []byte {
	out := make([]byte, 0, len(frontend)+len(statement))
	backendMessages(frontend, func(typ byte, msg []byte) error {
		if typ != 'B' {
			out = append(out, msg...)
			return nil
		}
		portal, off, err := cbytes(msg, 5)
		if err == nil {
			_, off, err = cbytes(msg, off)
		}
		if err != nil {
			out = append(out, msg...)
			return nil
		}
		rest := msg[off:]
		out = append(out, 'B')
		out = binary.BigEndian.AppendUint32(out, uint32(4+len(portal)+1+len(statement)+1+len(rest)))
		out = append(append(out, portal...), 0)
		out = append(append(out, statement...), 0)
		out = append(out, rest...)
		return nil
	})
	return out
}

// scatterEngine runs r on each of its shards at once and answers with
// what r's engine plan makes of their rows, streaming: rows go to the
// client as the operators produce them (shardstream.go).
func (c *clientConn) scatterEngine(ctx context.Context, r *routed, frontend []byte, prepared []*pb.PreparedStatement) (bool, error) {
	if r.engine.OrdersBytes() && !c.utf8Client() {
		c.out = appendError(c.out, "ERROR", pgerr.New(pgerr.FeatureNotSupported, "ordering text across shards with a client_encoding other than UTF8 is not supported yet"))
		c.failTx()
		return true, nil
	}
	if sql := r.engine.ShardSQL; sql != "" {
		switch {
		case len(frontend) > 0 && frontend[0] == 'Q':
			frontend = queryMessage(sql)
		case r.shardStmt != nil:
			// The client's Bind binds the shards' statement instead:
			// the same parameters, the same output columns.
			frontend = rebind(frontend, r.shardStmt.Name)
			prepared = append(append([]*pb.PreparedStatement(nil), prepared...), r.shardStmt)
		default:
			c.out = appendError(c.out, "ERROR", errEngineRebind)
			c.failTx()
			return true, nil
		}
	}
	if hidden := r.engine.Hidden; hidden > 0 && frontend[0] != 'Q' {
		var err error
		if frontend, err = withHiddenFormats(frontend, r.engine.Visible, hidden); err != nil {
			c.out = appendError(c.out, "ERROR", pgerr.New(pgerr.ProtocolViolation, "%v", err))
			c.failTx()
			return true, nil
		}
	}
	formats := resultFormats(frontend)
	streams, ok := c.startStreams(ctx, r, frontend, prepared)
	if !ok {
		return true, nil
	}
	ended := false
	defer func() {
		if !ended {
			// A panic in an operator: the shards' goroutines must not
			// wait forever on their channels (serve recovers).
			c.cancelStreams(streams)
			for _, s := range streams {
				for range s.chunks {
				}
			}
			c.endStreams(streams)
		}
	}()
	mem := engine.NewMemory(c.settings.queryMemoryBytes(), c.srv.memory, c.srv.spill)
	defer mem.Close()
	out := engineOutput{c: c, first: streams[0]}
	inputs := make([]engine.Operator, len(streams))
	for i, s := range streams {
		s.waiting = out.flushWaiting
		inputs[i] = s
	}
	// The first shard's messages before its rows (ParseComplete,
	// BindComplete, RowDescription) frame the answer: read them first.
	// Its RowDescription is cut back to the statement's own columns
	// when the shards return hidden ones.
	streams[0].framing = true
	if r.engine.Hidden > 0 {
		streams[0].visible = r.engine.Visible
	}
	err := streams[0].peek()
	if err == nil {
		format := func(column int) engine.Format { return formatOf(formats, column) }
		var op engine.Operator
		if an := c.analyzing; an != nil {
			var stats []*engine.OperatorStats
			op, stats = r.engine.BuildAnalyzed(inputs, format, mem)
			an.addOperators(stats)
		} else {
			op = r.engine.BuildWithin(inputs, format, mem)
		}
		err = engine.Drain(op, out.row)
	}
	if err != nil || out.err != nil {
		// Nothing more is needed of the shards still answering.
		c.cancelStreams(streams)
	}
	for _, s := range streams {
		if end := s.drain(); err == nil {
			err = end
		}
	}
	c.endStreams(streams)
	ended = true
	if out.err != nil {
		return true, out.err // the client is gone
	}
	return c.answerEngine(&out, err)
}

// startStreams opens r's shards' sessions (in the client's transaction
// if one is open) and sends the statement to all of them. When a shard
// cannot be reached it answers the client and returns false, having
// sent nothing.
func (c *clientConn) startStreams(ctx context.Context, r *routed, frontend []byte, prepared []*pb.PreparedStatement) ([]*shardStream, bool) {
	streams := make([]*shardStream, len(r.shards))
	backends := make([]*backendSession, len(r.shards))
	for i, shard := range r.shards {
		b, err := c.session(ctx, shard, c.settings.replica())
		if err == nil {
			err = c.joinTx(ctx, b)
		}
		if err != nil {
			c.out = appendError(c.out, "ERROR", shardError(shard, err))
			c.failTx()
			return nil, false
		}
		streams[i] = &shardStream{shard: shard, b: b, analysis: c.analyzing}
		backends[i] = b
		c.stat.ranOn(shard)
	}
	c.runMu.Lock()
	c.streaming = backends
	c.runMu.Unlock()
	for _, s := range streams {
		s.start(&pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: frontend, Prepared: prepared, Settings: c.settings.list})
	}
	return streams, true
}

// cancelStreams asks the shards still answering to stop, as a
// CancelRequest would.
func (c *clientConn) cancelStreams(streams []*shardStream) {
	for _, s := range streams {
		select {
		case <-s.done():
			continue
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		s.b.inst.client.Cancel(ctx, &pb.CancelRequest{CancelToken: c.cancelToken})
		cancel()
	}
}

// endStreams takes in how each shard's answer ended, once all are read:
// its transaction status, or the loss of its session.
func (c *clientConn) endStreams(streams []*shardStream) {
	c.runMu.Lock()
	c.streaming = nil
	c.runMu.Unlock()
	for _, s := range streams {
		if s.err != nil {
			c.dropSession(s.b)
			continue
		}
		c.adoptStatus(s.shard, s.res.TxStatus)
	}
}

// answerEngine ends the answer: as Postgres does, the statement's error
// or its CommandComplete after the rows sent. A shard's own error goes
// as it is, with its notices.
func (c *clientConn) answerEngine(out *engineOutput, err error) (bool, error) {
	var failure *shardFailure
	var lost *shardLost
	switch {
	case errors.As(err, &failure):
		if err := out.flushRows(); err != nil {
			return true, err
		}
		c.out = append(c.out, failure.s.failureMessages()...)
	case errors.As(err, &lost):
		if err := out.flushRows(); err != nil {
			return true, err
		}
		lostErr := lost.s.err
		if lostErr == nil {
			lostErr = pgerr.New(pgerr.ProtocolViolation, "%v", err)
		}
		c.out = appendError(c.out, "ERROR", shardError(lost.s.shard, lostErr))
	case err != nil:
		var coded pgerr.Coded
		if !errors.As(err, &coded) {
			err = pgerr.New(pgerr.InternalError, "merging the shards' answers: %v", err)
		}
		if err := out.finishRows(); err != nil {
			return true, err
		}
		c.out = appendError(c.out, "ERROR", err)
	default:
		if err := out.finishRows(); err != nil {
			return true, err
		}
		c.out = appendCommandComplete(c.out, "SELECT "+strconv.FormatInt(out.rows, 10))
		c.out = append(c.out, out.first.trailer...)
		return false, nil
	}
	c.failTx()
	return true, nil
}

// utf8Client reports whether the shards send the session text in UTF-8
// (the server's encoding, unconverted): client_encoding UTF8, or
// SQL_ASCII, which Postgres does not convert.
func (c *clientConn) utf8Client() bool {
	v, ok := c.settings.get("client_encoding")
	if !ok {
		return true // the server's encoding, UTF8 (pgmanager's initdb)
	}
	v = strings.NewReplacer("-", "", "_", "", "'", "", " ", "").Replace(strings.ToLower(v))
	return v == "utf8" || v == "unicode" || v == "sqlascii"
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
