package router

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// errAborted is what Postgres says to statements in a failed transaction.
var errAborted = pgerr.New("25P02", "current transaction is aborted, commands ignored until end of transaction block")

// execute runs one statement the router does not answer itself, sending
// frontend (the client's messages, ending in Query or Sync) where r says,
// and forwards the answer without its ReadyForQuery. It reports whether
// the statement failed.
func (c *clientConn) execute(ctx context.Context, r *routed, frontend []byte, prepared []*pb.PreparedStatement, scan bool) (bool, error) {
	if c.tx.failed && !r.rollbackTo && r.kind != kindCommit && r.kind != kindRollback {
		// A failed transaction may still end, or return to a savepoint.
		c.out = appendError(c.out, "ERROR", errAborted)
		return true, nil
	}
	if err := c.checkFanout(r); err != nil {
		c.out = appendError(c.out, "ERROR", err)
		c.failTx()
		return true, nil
	}
	if len(r.shards) == 0 {
		c.out = appendError(c.out, "ERROR", pgerr.New(pgerr.InternalError, "the statement has no target shard"))
		c.failTx()
		return true, nil
	}
	var failed bool
	var err error
	if c.implicitAtomic(r) {
		failed, err = c.scatterAtomic(ctx, r, frontend, prepared, scan)
	} else {
		failed, err = c.dispatch(ctx, r, frontend, prepared, scan)
	}
	c.noteSequenceCalls(r, failed)
	if c.tx.active && r.kind == kindRegular && !r.autocommit && r.mode != routeInsertSelect {
		// Not a plain read: it may have written where it ran, even when
		// it failed (a savepoint may keep what it did before). An
		// INSERT ... SELECT the router runs only described itself on
		// its shard; the statements it ran noted their own writes.
		c.tx.noteWrites(r.shards)
	}
	// DDL may have changed the schema or who can log in, on one shard as
	// on every shard (a one-shard topology runs it on one), and even when
	// a shard refused it after others ran it.
	if r.ddl {
		c.srv.schemaChanged()
		c.tx.ddl = c.tx.active
		if c.tx.active {
			// Statements the session prepares later in its transaction
			// see the change (prepared.shardName); its end announces it.
			c.srv.noteSchemaEpoch(time.Now())
		} else {
			c.srv.announceSchemaChange(c.database) // moves the epoch too
		}
	}
	if r.roles {
		c.srv.roles.invalidate()
	}
	return failed, err
}

// dispatch sends the statement the way its route mode says.
func (c *clientConn) dispatch(ctx context.Context, r *routed, frontend []byte, prepared []*pb.PreparedStatement, scan bool) (bool, error) {
	switch r.mode {
	case routeScatter:
		if r.engine != nil {
			return c.scatterEngine(ctx, r, frontend, prepared)
		}
		return c.scatter(ctx, r, frontend, prepared)
	case routeEverywhere:
		return c.everywhere(ctx, r, frontend, prepared)
	case routeSplit:
		return c.splitInsert(ctx, r, frontend, prepared)
	case routeCopyInto:
		return c.startCopyInto(ctx, r, frontend, prepared)
	case routeGather:
		return c.gatherCompute(ctx, r, frontend, prepared)
	case routeKeyMove:
		return c.keyMove(ctx, r, frontend)
	case routeInsertSelect:
		return c.insertSelectExtended(ctx, r, frontend)
	}
	return c.one(ctx, r, r.shards[0], frontend, prepared, scan)
}

// checkFanout applies tessera.fanout.
func (c *clientConn) checkFanout(r *routed) error {
	n := len(r.shards)
	switch c.settings.fanout {
	case "single":
		if n > 1 {
			return pgerr.New(pgerr.FeatureNotSupported, "tessera.fanout is single: the statement reaches %d shards", n)
		}
	case "multi":
		if r.allShards && n > 1 {
			return pgerr.New(pgerr.FeatureNotSupported, "tessera.fanout is multi: the statement has no shard-key value and would reach every shard of its group")
		}
	}
	return nil
}

// failTx marks an open transaction failed after an error the router
// raised itself, as Postgres would have.
func (c *clientConn) failTx() {
	if c.tx.active {
		c.tx.failed, c.tx.routerFailed = true, true
	}
}

// one runs a statement on one shard. A statement that no transaction
// holds on that shard may wait in the buffer while the shard's primary
// changes, and run again once it is back (buffer.go).
func (c *clientConn) one(ctx context.Context, r *routed, shard string, frontend []byte, prepared []*pb.PreparedStatement, scan bool) (bool, error) {
	replica := c.settings.replica()
	bufferable := !replica && c.srv.buffers != nil && !c.tx.has(shard)
	var t ticket
	for {
		if bufferable {
			if err := c.srv.buffers.hold(ctx, shard, &t); err != nil {
				c.out = appendError(c.out, "ERROR", err)
				c.failTx()
				return true, nil
			}
		}
		b, err := c.session(ctx, shard, replica)
		if err == nil {
			err = c.joinTx(ctx, b)
		}
		if err == nil && !replica && !r.readOnly && b.inst.diskLow() {
			err = errLowDisk(shard)
		}
		if err != nil {
			// Nothing reached Postgres: the sidecar or the primary is
			// missing, which is what a failover looks like from here.
			if code := pgerr.Code(err); bufferable && (code == "08006" || qualifies(code)) && c.srv.buffers.failed(shard, &t) {
				continue
			}
			c.out = appendError(c.out, "ERROR", err)
			c.failTx()
			return true, nil
		}
		mode := pb.Mode_STATEMENT
		if r.sessionState {
			c.sessionPinned = true
		}
		if c.sessionPinned {
			mode = pb.Mode_SESSION
		}
		if r.preparedView {
			c.showOwnStatements(b, shard)
		}
		// The forwarder, its emit function and the batch are the
		// connection's, reused: one statement at a time runs here, and
		// the hot path allocated all three per statement.
		f := &c.fwd
		*f = forwarder{c: c, scan: scan, auto: r.autoPrepared}
		if c.fwdEmit == nil {
			c.fwdEmit = f.emit
		}
		batch := &c.sidecarBatch
		batch.Mode, batch.Frontend, batch.Prepared = mode, frontend, prepared
		// The sidecar checks the batch's shape itself (pipelinable).
		batch.Autocommit = r.autocommit && mode == pb.Mode_STATEMENT && !c.tx.active
		res, err := c.run(b, batch, c.fwdEmit)
		if err != nil {
			if f.err != nil {
				return true, f.err
			}
			f.finish(true)
			c.out = appendError(c.out, "ERROR", shardError(shard, err))
			c.failTx()
			return true, nil
		}
		if bufferable && f.unwritten() && res.TxStatus != pb.TxStatus_IN_TRANSACTION {
			switch c.primaryRefused(b, f.held) {
			case refusedByPrimary:
				if c.srv.buffers.failed(shard, &t) {
					// The primary refused before running anything; the
					// answer is dropped and the statement waits for the
					// next primary. The session stays: session() moves it
					// if the primary changes.
					continue
				}
			case refusedByFence:
				if r.replannable && !c.tx.active {
					// Nothing ran (autocommit rolled the statement back);
					// the answer is dropped and the caller plans the
					// statement again once the table has moved.
					return true, errCutoverFenced
				}
			}
		}
		if r.autoPrepared && f.unwritten() && autoFallbackCode(firstErrorCode(f.held)) {
			return true, errAutoFallback
		}
		if err := f.finish(res.CopyIn); err != nil {
			return true, err
		}
		if res.CopyIn {
			c.copyIn = b
			return false, nil
		}
		if c.sessionPinned {
			// The backend may now speak unasked (LISTEN): deliver that
			// while the client is idle too.
			b.sess.Listen(c.pushAsync)
		}
		c.adoptStatus(b.shard, res.TxStatus)
		return f.failed || res.TxStatus == pb.TxStatus_FAILED, nil
	}
}

// refusal is why a primary refused a statement without running it.
type refusal int

const (
	notRefused refusal = iota
	// refusedByPrimary: its own state (it could not connect to
	// Postgres, Postgres was starting or stopping, or it is read-only):
	// the shard's next primary will run it.
	refusedByPrimary
	// refusedByFence: a cutover's fence trigger (pgerr.CutoverFencePrefix)
	// on the table it writes, which is moving to other shards: the
	// topology that moved it will send it there.
	refusedByFence
)

// primaryRefused reports whether, and why, an answer's first error says
// the primary refused the statement without running it. A read-only
// error (25006) counts for the primary only when the instance's health
// says it no longer takes writes (fenced, demoted): the client's own
// read-only transaction (SET SESSION CHARACTERISTICS AS TRANSACTION READ
// ONLY) gets the same 25006, and that is its answer. A 25006 whose
// message begins with the cutover fence's prefix is the fence's.
func (c *clientConn) primaryRefused(b *backendSession, answer []byte) refusal {
	if fenceRefused(answer) {
		return refusedByFence
	}
	code := firstErrorCode(answer)
	if !qualifies(code) || code == pgerr.ReadOnlySQLTransaction && b.inst.writable() {
		return notRefused
	}
	return refusedByPrimary
}

// fenceRefused reports whether the answer's first error is a cutover
// fence's, with nothing before it that shows a statement ran: only the
// acknowledgements and descriptions the protocol sends before running
// (ParseComplete, BindComplete, ParameterDescription, RowDescription,
// NoData) and notices.
func fenceRefused(answer []byte) bool {
	fenced := false
	backendMessages(answer, func(typ byte, msg []byte) error {
		switch typ {
		case '1', '2', 't', 'T', 'n', 'N':
			return nil
		case 'E':
			e := pgwire.ParseError(msg)
			fenced = e.Code == pgerr.ReadOnlySQLTransaction && strings.HasPrefix(e.Message, pgerr.CutoverFencePrefix)
		}
		return errStopWalk
	})
	return fenced
}

// adoptStatus follows a transaction a shard reports that the router did
// not open itself (BEGIN inside a multi-statement string, or sent through
// the extended protocol), and its end.
func (c *clientConn) adoptStatus(shard string, st pb.TxStatus) {
	switch st {
	case pb.TxStatus_IN_TRANSACTION, pb.TxStatus_FAILED:
		if !c.tx.active {
			saved := c.settings
			c.tx = txState{active: true, begin: "BEGIN", shards: []string{shard}, settings: &saved, replica: c.settings.replica()}
		}
		if st == pb.TxStatus_FAILED {
			c.tx.failed = true
		} else if len(c.tx.shards) <= 1 {
			// ROLLBACK TO recovered the (single-shard) transaction.
			c.tx.failed = false
		}
	case pb.TxStatus_IDLE:
		if c.tx.active && len(c.tx.shards) == 1 && c.tx.shards[0] == shard {
			c.forgetTx()
		} else if c.tx.active && len(c.tx.shards) > 1 && c.tx.has(shard) {
			// The transaction's part on this shard ended under it (its
			// backend was terminated): nothing more may run there, where
			// it would run outside the transaction, so the transaction
			// fails, as a transaction on one Postgres whose connection
			// died cannot go on.
			c.tx.failed, c.tx.routerFailed = true, true
		}
	}
}

// scatter runs a read on every target shard in turn and merges the rows.
func (c *clientConn) scatter(ctx context.Context, r *routed, frontend []byte, prepared []*pb.PreparedStatement) (bool, error) {
	m := merger{c: c, limit: -1}
	if r.limited {
		m.limit = r.limit
	}
	for i, shard := range r.shards {
		if i > 0 && m.full() {
			// LIMIT n: n rows are in hand; the other shards need not run
			// (the first always does: its answer frames the rows).
			break
		}
		b, err := c.session(ctx, shard, c.settings.replica())
		if err == nil {
			err = c.joinTx(ctx, b)
		}
		if err == nil {
			var res sidecar.Result
			res, err = c.run(b, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: frontend, Prepared: prepared}, m.emit)
			if err == nil {
				c.adoptStatus(shard, res.TxStatus)
			}
		}
		if err != nil {
			c.out = appendError(c.out, "ERROR", shardError(shard, err))
			c.failTx()
			return true, nil
		}
		if m.failed {
			c.failTx()
			return true, nil
		}
		m.next()
	}
	if tag := m.tag(); tag != "" {
		c.out = appendCommandComplete(c.out, tag)
	}
	return false, nil
}

// everywhere runs DDL on every target shard. The first shard's answer goes
// to the client; a failure elsewhere is reported naming the shard.
func (c *clientConn) everywhere(ctx context.Context, r *routed, frontend []byte, prepared []*pb.PreparedStatement) (bool, error) {
	others, othersPrepared := frontend, prepared
	if r.elsewhere != "" {
		others, othersPrepared = queryMessage(r.elsewhere), nil
	}
	var failed []string
	var firstErr error
	for i, shard := range r.shards {
		if i == 0 {
			bad, err := c.one(ctx, r, shard, frontend, prepared, true)
			if err != nil || bad {
				return true, err
			}
			continue
		}
		b, err := c.session(ctx, shard, c.settings.replica())
		if err == nil {
			err = c.joinTx(ctx, b)
		}
		if err == nil {
			var res sidecar.Result
			res, _, err = c.quiet(b, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: others, Prepared: othersPrepared})
			c.adoptStatus(shard, res.TxStatus)
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if firstErr != nil {
			failed = append(failed, shard)
			break
		}
	}
	if firstErr != nil {
		c.out = appendError(c.out, "ERROR", pgerr.New(pgerr.Code(firstErr), "on shard %s: %v", failed[0], firstErr))
		c.failTx()
		return true, nil
	}
	return false, nil
}

// errLowDisk refuses a write to a primary that reports low disk.
func errLowDisk(shard string) error {
	return pgerr.New("53100", "shard %s is low on disk: it refuses writes until its disk is resized", shard)
}

// answerOf runs batch on shard, in the client's transaction if one is
// open, and returns the whole answer, for split INSERTs, whose answers
// the router combines. A write to a
// primary low on disk is refused.
//
// limit, when above 0, bounds the bytes of the answer kept: beyond it the
// answer is an error (54000).
func (c *clientConn) answerOf(ctx context.Context, shard string, write bool, batch *pb.Batch, limit int64) ([]byte, error) {
	replica := c.settings.replica()
	b, err := c.session(ctx, shard, replica)
	if err == nil {
		err = c.joinTx(ctx, b)
	}
	if err == nil && write && !replica && b.inst.diskLow() {
		err = errLowDisk(shard)
	}
	if err != nil {
		return nil, err
	}
	var answer []byte
	over := false
	res, err := c.run(b, batch, func(chunk []byte, _ bool) error {
		// Past the limit the answer is read to its end, kept no more:
		// the session stays usable for the rollback that follows.
		if over = over || limit > 0 && int64(len(answer)+len(chunk)) > limit; !over {
			answer = append(answer, chunk...)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	c.adoptStatus(shard, res.TxStatus)
	if over {
		return nil, pgerr.New("54000", "the answer of shard %s is more than tessera.gather_limit (%d bytes) for the router to hold", shard, limit)
	}
	return answer, nil
}

// shardError names the shard in a failure to run a statement there. A
// failure without a SQLSTATE is the sidecar's connection breaking (the
// sidecar or its host died): 08006, as a client of a Postgres that died
// would see; whether the statement ran is unknown.
func shardError(shard string, err error) error {
	var coded pgerr.Coded
	if errors.As(err, &coded) {
		return fmt.Errorf("shard %s: %w", shard, err)
	}
	return pgerr.New("08006", "shard %s: lost the connection to its sidecar: %v", shard, err)
}

// queryMessage builds a Query message for one statement.
func queryMessage(sql string) []byte {
	q, _ := (&pgproto3.Query{String: sql}).Encode(nil)
	return q
}
