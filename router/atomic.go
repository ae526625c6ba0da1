package router

import (
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"sync"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/twophase"
)

// Atomic commit: a transaction that wrote on two shards or more commits
// with two-phase commit, presumed abort (package twophase has the
// protocol). The commit point is the first shard written; every other
// written shard prepares, the commit point records the decision in its
// own transaction and commits, then the prepared parts commit, all before
// the client hears COMMIT. A transaction that wrote on one shard commits
// as before, with no extra round trip.

// Values of tessera.commit.
const (
	commitAtomic     = "atomic"      // two-phase commit across shards (the default)
	commitBestEffort = "best_effort" // shard after shard: a failure between leaves some committed
)

// decisionLockTimeout bounds how long resolving an unknown outcome waits
// for the commit point's transaction.
const decisionLockTimeout = "10s"

// commitCoordinator is the router's state for atomic commits: names for
// global transactions, and the (shard, database) pairs known to hold the
// decisions table. Its zero value is ready.
type commitCoordinator struct {
	mu  sync.Mutex
	gen *twophase.Generator
	// ensured holds shard + "\x00" + database.
	ensured sync.Map
}

func (cc *commitCoordinator) nextGID(commitPoint string) string {
	cc.mu.Lock()
	defer cc.mu.Unlock()
	if cc.gen == nil {
		cc.gen = twophase.NewGenerator()
	}
	return cc.gen.Next(commitPoint)
}

// ensureDecisions makes sure the commit point's database has the
// decisions table, creating it as the admin the first time.
func (s *Server) ensureDecisions(ctx context.Context, shard, database string) error {
	key := shard + "\x00" + database
	if _, ok := s.commits.ensured.Load(key); ok {
		return nil
	}
	if _, err := s.runAdminQuery(ctx, shard, database, twophase.EnsureDecisions); err != nil {
		return shardError(shard, err)
	}
	s.commits.ensured.Store(key, struct{}{})
	return nil
}

// decide reads gid's final outcome on its commit point as the admin (see
// twophase.Decide): whether the transaction committed.
func (s *Server) decide(ctx context.Context, commitPoint, database, gid string) (bool, error) {
	rows, err := s.runAdminQuery(ctx, commitPoint, database, twophase.Decide(gid, decisionLockTimeout))
	if err != nil {
		return false, err
	}
	if len(rows) != 1 || len(rows[0]) != 2 {
		return false, pgerr.New(pgerr.InternalError, "no decision row for %s", gid)
	}
	return twophase.Committed(s.cfg.Secret, gid, rows[0][0], rows[0][1]), nil
}

// needsAtomicCommit reports whether the client's COMMIT of the open
// transaction is a two-phase commit.
func (c *clientConn) needsAtomicCommit() bool {
	return c.settings.atomicCommit() && !c.tx.failed && !c.tx.replica && len(c.tx.wrote) > 1
}

// implicitAtomic reports whether a statement outside a transaction needs
// one of the router's own so that its writes on several shards commit
// atomically: a scatter that is not a plain read (UPDATE, DELETE, a
// function with side effects). A split INSERT has its own (insertsplit.go).
func (c *clientConn) implicitAtomic(r *routed) bool {
	return !c.tx.active && r.kind == kindRegular && !r.autocommit && r.mode == routeScatter &&
		len(r.shards) > 1 && c.settings.atomicCommit() && !c.settings.replica()
}

// scatterAtomic runs a scatter write in a transaction of the router's
// own and commits it atomically. When the commit fails, a simple Query's
// answer loses its CommandComplete, as Postgres commits a single
// statement before it reports it done; in the extended protocol Postgres
// commits at Sync, after CommandComplete, and so does this.
func (c *clientConn) scatterAtomic(ctx context.Context, r *routed, frontend []byte, prepared []*pb.PreparedStatement, scan bool) (bool, error) {
	saved := c.settings
	c.tx = txState{active: true, begin: "BEGIN", settings: &saved}
	mark := len(c.out)
	failed, err := c.dispatch(ctx, r, frontend, prepared, scan)
	if err != nil || failed || c.tx.failed {
		c.endImplicit(false)
		return true, err
	}
	commitErr := c.endImplicit(true)
	if commitErr == nil {
		return false, nil
	}
	if len(frontend) > 0 && frontend[0] == 'Q' {
		if at := lastCommandComplete(c.out, mark); at >= 0 {
			c.out = c.out[:at]
		}
	}
	c.out = appendError(c.out, "ERROR", commitErr)
	return true, nil
}

// lastCommandComplete returns where the last CommandComplete message in
// out[from:] begins, or -1.
func lastCommandComplete(out []byte, from int) int {
	at := -1
	for i := from; i+5 <= len(out); {
		n := int(binary.BigEndian.Uint32(out[i+1:]))
		if out[i] == 'C' {
			at = i
		}
		i += 1 + n
	}
	return at
}

// atomicCommit is one two-phase commit under way.
type atomicCommit struct {
	gid         string
	commitPoint string
	prepared    []string // the shards whose part is prepared under gid
}

// prepareAtomic is the first phase: it commits the transaction's shards
// that only read, prepares every written shard but the commit point (the
// first written) at once, and leaves the transaction open on the commit
// point alone (c.tx.shards). When it fails, the parts on the other shards
// are rolled back (a prepared part it could not reach has no decision
// row, so recovery rolls it back) and the commit point's part must be.
func (c *clientConn) prepareAtomic(ctx context.Context) (*atomicCommit, error) {
	ac := &atomicCommit{commitPoint: c.tx.wrote[0]}
	err := c.checkDurability(c.tx.wrote)
	if err == nil {
		err = c.srv.ensureDecisions(ctx, ac.commitPoint, c.database)
	}
	var readers []string
	for _, s := range c.tx.shards {
		if !c.tx.hasWritten(s) {
			readers = append(readers, s)
		}
	}
	others := c.tx.wrote[1:]
	if err == nil && len(readers) > 0 {
		// They hold no writes: their commit decides nothing.
		err = firstError(c.onEach(ctx, readers, "COMMIT", "COMMIT"))
		if err != nil {
			c.onEach(ctx, readers, "ROLLBACK", "")
		}
	}
	if err != nil {
		c.onEach(ctx, others, "ROLLBACK", "")
		c.tx.shards, c.tx.wrote = []string{ac.commitPoint}, []string{ac.commitPoint}
		return nil, err
	}
	ac.gid = c.srv.commits.nextGID(ac.commitPoint)
	// PREPARE TRANSACTION in a transaction that failed answers ROLLBACK,
	// not an error: only its own tag means prepared.
	errs := c.onEach(ctx, others, "PREPARE TRANSACTION "+pgwire.QuoteLiteral(ac.gid), "PREPARE TRANSACTION")
	var failedOn []string
	for i, e := range errs {
		if e == nil {
			ac.prepared = append(ac.prepared, others[i])
		} else {
			failedOn = append(failedOn, others[i])
		}
	}
	c.tx.shards, c.tx.wrote = []string{ac.commitPoint}, []string{ac.commitPoint}
	if err := firstError(errs); err != nil {
		c.onEach(ctx, failedOn, "ROLLBACK", "")
		// A PREPARE whose answer was an error may still have prepared
		// (its backend was terminated after): undo it now rather than
		// leave its locks to recovery.
		c.onEach(ctx, failedOn, twophase.Finish(ac.gid, false), "")
		c.finishPrepared(ctx, ac, false)
		return nil, err
	}
	commitStep(stepPrepared)
	return ac, nil
}

// checkDurability refuses two-phase commit on a shard whose durability is
// async: a failover there may lose a prepared part or a decision that a
// client was told committed.
func (c *clientConn) checkDurability(shards []string) error {
	for _, s := range shards {
		if st, ok := c.srv.shards.state(s); ok && st.Durability.OrDefault() == store.DurabilityAsync {
			return pgerr.New(pgerr.FeatureNotSupported,
				"atomic commit across shards needs durability sync or stronger: shard %s is async (set its durability, or SET tessera.commit = 'best_effort')", s)
		}
	}
	return nil
}

// finishPrepared is the second phase: COMMIT PREPARED or ROLLBACK
// PREPARED on every prepared part, at once. A part it cannot finish stays
// prepared for recovery, which the router asks to run now; it returns a
// warning for the client then, as the transaction's outcome stands.
func (c *clientConn) finishPrepared(ctx context.Context, ac *atomicCommit, commit bool) string {
	if len(ac.prepared) == 0 {
		return ""
	}
	want := "COMMIT PREPARED"
	if !commit {
		want = "ROLLBACK PREPARED"
	}
	errs := c.onEach(ctx, ac.prepared, twophase.Finish(ac.gid, commit), want)
	var left []string
	for i, e := range errs {
		if e != nil {
			left = append(left, ac.prepared[i])
			c.srv.log.Warn("atomic commit: a prepared part is left for recovery", "gid", ac.gid, "shard", ac.prepared[i], "commit", commit, "err", e)
		}
	}
	if len(left) == 0 {
		return ""
	}
	c.srv.startCommitRecovery()
	if !commit {
		return ""
	}
	return "the transaction committed, but shards " + strings.Join(left, ", ") +
		" have not applied their part yet: recovery will, and until then reads there do not see it"
}

// startCommitRecovery asks the control plane to resolve prepared
// transactions now, if the router reaches it.
func (s *Server) startCommitRecovery() {
	if s.cfg.CommitRecovery == nil {
		return
	}
	go func() {
		if err := s.cfg.CommitRecovery(context.Background()); err != nil {
			s.log.Warn("atomic commit: starting recovery failed", "err", err)
		}
	}()
}

// commitAtomicSimple commits the open transaction with two-phase commit
// for a client's COMMIT in the simple protocol, in one round trip to the
// commit point (the decision row and COMMIT in one string). It returns the
// CommandComplete tag, a warning for the client, or the error the
// transaction ended with; the transaction has ended on every shard.
func (c *clientConn) commitAtomicSimple(ctx context.Context) (string, error) {
	ac, err := c.prepareAtomic(ctx)
	cp := ac.commitPointOr(c.tx.shards)
	b, berr := c.session(ctx, cp, false)
	if err != nil {
		if berr == nil {
			c.quiet(b, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: queryMessage("ROLLBACK")})
		}
		return "", err
	}
	if berr != nil {
		// Nothing decided: presumed abort.
		c.finishPrepared(ctx, ac, false)
		return "", shardError(cp, berr)
	}
	res, tag, err := c.quiet(b, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: queryMessage(twophase.RecordCommit(c.srv.cfg.Secret, ac.gid) + ";\nCOMMIT")})
	return c.afterCommitPoint(ctx, ac, b, res, tag, err)
}

// afterCommitPoint finishes an atomic commit once the commit point
// answered its COMMIT (tag, err): it finds the outcome (asking the
// decision row when the answer was lost), finishes the prepared parts,
// and returns the warning or error the client gets.
func (c *clientConn) afterCommitPoint(ctx context.Context, ac *atomicCommit, b *backendSession, res sidecar.Result, tag string, err error) (string, error) {
	committed := err == nil && tag == "COMMIT"
	if err != nil && hasSQLState(err) && res.TxStatus != pb.TxStatus_IDLE {
		// The decision row or the commit was refused: the transaction
		// is still open (failed) on the commit point.
		c.quiet(b, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: queryMessage("ROLLBACK")})
	}
	if err != nil {
		// Whether the commit point committed is in its decision row:
		// an error does not say it did not (a backend terminated while
		// its commit waited for the synchronous replica has committed,
		// and a lost connection says nothing).
		var derr error
		committed, derr = c.srv.decide(ctx, ac.commitPoint, c.database, ac.gid)
		if derr != nil {
			c.srv.startCommitRecovery()
			return "", pgerr.New("08007", "shard %s: lost the connection while committing, and could not read the outcome (%v); recovery will finish the transaction", ac.commitPoint, derr)
		}
	}
	commitStep(stepDecided)
	warning := c.finishPrepared(ctx, ac, committed)
	commitStep(stepFinished)
	if committed {
		return warning, nil
	}
	if decisionConflict(err) {
		return "", errRecoveryAborted
	}
	if err == nil {
		// COMMIT answered ROLLBACK: the commit point's part had failed.
		return "", pgerr.New("40000", "the transaction was rolled back on shard %s at commit", ac.commitPoint)
	}
	return "", shardError(ac.commitPoint, err)
}

func (ac *atomicCommit) commitPointOr(shards []string) string {
	if ac != nil {
		return ac.commitPoint
	}
	return shards[0]
}

// hasSQLState reports whether err came from Postgres (or the router),
// rather than from losing the connection.
func hasSQLState(err error) bool {
	var coded pgerr.Coded
	return errors.As(err, &coded)
}

// onEach runs sql on the client's session to each shard at once, and
// returns each one's error: a shard's own, the failure to reach it, or,
// when want is set, an answer whose CommandComplete tag is not want.
func (c *clientConn) onEach(ctx context.Context, shards []string, sql, want string) []error {
	errs := make([]error, len(shards))
	sessions := make([]*backendSession, len(shards))
	for i, shard := range shards {
		sessions[i], errs[i] = c.session(ctx, shard, false)
	}
	q := queryMessage(sql)
	var wg sync.WaitGroup
	lost := make([]bool, len(shards))
	for i, b := range sessions {
		if errs[i] != nil {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			tag, err := runQuiet(b, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: q, Settings: c.settings.list})
			if err != nil {
				lost[i] = !hasSQLState(err)
			} else if want != "" && tag != want {
				err = pgerr.New(pgerr.InternalError, "%s answered %s", sql, tag)
			}
			errs[i] = err
		}()
	}
	wg.Wait()
	for i, b := range sessions {
		if lost[i] {
			// c.run's rule, applied here rather than in the goroutines
			// that share c.backends.
			c.dropSession(b)
		}
		if errs[i] != nil {
			errs[i] = shardError(shards[i], errs[i])
		}
	}
	return errs
}

// runQuiet runs batch on b and returns its last CommandComplete tag and
// the first error the shard reported or the failure to reach it. Unlike
// clientConn.quiet it touches nothing of the client's connection, so that
// several may run at once.
func runQuiet(b *backendSession, batch *pb.Batch) (string, error) {
	var first error
	tag := ""
	_, err := b.sess.RunLast(batch, func(chunk []byte, _ bool) error {
		return backendMessages(chunk, func(typ byte, msg []byte) error {
			switch typ {
			case 'E':
				if first == nil {
					first = parseError(msg)
				}
			case 'C':
				tag = string(msg[5 : len(msg)-1])
			}
			return nil
		})
	})
	if err != nil {
		return "", err
	}
	return tag, first
}

func firstError(errs []error) error {
	for _, e := range errs {
		if e != nil {
			return e
		}
	}
	return nil
}

func (t *txState) hasWritten(shard string) bool {
	for _, s := range t.wrote {
		if s == shard {
			return true
		}
	}
	return false
}

// appendWarning appends a WARNING notice.
func appendWarning(out []byte, msg string) []byte {
	return appendMsg(out, 'N', []byte("SWARNING\x00VWARNING\x00C01000\x00M"+msg+"\x00\x00"))
}

// chained reports whether a COMMIT or ROLLBACK statement says AND CHAIN.
func chained(sql string) bool {
	u := strings.ToUpper(sql)
	return strings.Contains(u, "AND CHAIN") && !strings.Contains(u, "NO CHAIN")
}

// commitAtomicExtended commits the open transaction with two-phase commit
// for a COMMIT in an extended-protocol batch: the shards prepare and the
// commit point records the decision first, then the client's own batch
// commits the commit point and answers it. Whether that commit happened
// is read from the decision row when its answer is not a plain success.
func (c *clientConn) commitAtomicExtended(ctx context.Context, r *routed, frontend []byte, prepared []*pb.PreparedStatement, scan bool) (bool, error) {
	ac, err := c.prepareAtomic(ctx)
	cp := ac.commitPointOr(c.tx.shards)
	var xid string // the commit point's transaction
	if err == nil {
		var b *backendSession
		if b, err = c.session(ctx, cp, false); err == nil {
			xid, err = c.quietValue(b, twophase.RecordCommit(c.srv.cfg.Secret, ac.gid)+";\nSELECT pg_catalog.pg_current_xact_id()::text")
			if err == nil {
				commitStep(stepRecorded)
			}
		}
		if err != nil {
			// No decision is recorded (or recovery's abort is): roll
			// back.
			c.finishPrepared(ctx, ac, false)
			ac = nil
			if decisionConflict(err) {
				err = errRecoveryAborted
			}
		}
	}
	if err != nil {
		// The client's COMMIT must roll the commit point back.
		c.out = appendError(c.out, "ERROR", err)
		c.tx.failed = true
		if ferr := c.failOn(cp); ferr != nil {
			c.out = appendError(c.out, "ERROR", shardError(cp, ferr))
			return true, nil
		}
	}
	rr := *r
	rr.mode, rr.shards = routeOne, []string{cp}
	failed, xerr := c.execute(ctx, &rr, frontend, prepared, scan)
	if ac == nil {
		return true, xerr
	}
	// The client's COMMIT answering COMMIT does not prove that its
	// transaction committed: had its backend died after the decision
	// row, the session would run it on a fresh one, which answers COMMIT
	// (with a warning). The transaction's own status does.
	commitStep(stepCommitPointAnswered)
	committed, known := c.xactCommitted(ctx, cp, xid)
	if !known {
		var derr error
		if committed, derr = c.srv.decide(ctx, cp, c.database, ac.gid); derr != nil {
			c.srv.startCommitRecovery()
			if !failed {
				c.out = appendError(c.out, "ERROR", pgerr.New("08007", "shard %s: the outcome of the commit is unknown (%v); recovery will finish the transaction", cp, derr))
			}
			return true, xerr
		}
	}
	commitStep(stepDecided)
	if warning := c.finishPrepared(ctx, ac, committed); warning != "" {
		c.out = appendWarning(c.out, warning)
	}
	commitStep(stepFinished)
	if !committed && !failed {
		// The COMMIT's answer came from a backend that did not hold the
		// transaction: say what happened to it.
		c.out = appendError(c.out, "ERROR", pgerr.New("40000", "shard %s: the transaction was rolled back: its backend was lost before it committed", cp))
		return true, xerr
	}
	return failed, xerr
}

// errRecoveryAborted: recovery found the transaction's prepared parts and
// decided abort before its commit point committed.
var errRecoveryAborted = pgerr.New(pgerr.SerializationFailure,
	"the transaction was rolled back: recovery decided it aborted before its commit point committed (the commit took too long)")

// decisionConflict reports whether err is the decision row's insert
// finding recovery's: a unique violation on the decisions table.
func decisionConflict(err error) bool {
	return pgerr.Code(err) == "23505" && strings.Contains(err.Error(), "commit_decisions")
}

// clientPrepareRefusal is why a client's own PREPARE TRANSACTION gid
// cannot run, or nil: it runs on its transaction's one shard (as
// Postgres would), but the router cannot prepare a transaction over
// several shards under one client gid, nor let a client use a gid that
// recovery would take for one of its own.
func (c *clientConn) clientPrepareRefusal(gid string) error {
	if strings.HasPrefix(gid, twophase.Prefix) {
		return pgerr.New(pgerr.FeatureNotSupported, "transaction identifiers beginning with %q are reserved for Tessera's atomic commits", twophase.Prefix)
	}
	if c.tx.active && len(c.tx.shards) > 1 {
		return pgerr.New(pgerr.FeatureNotSupported,
			"PREPARE TRANSACTION in a transaction over several shards (%s) is not supported: commit it, and Tessera commits it atomically",
			strings.Join(c.tx.shards, ", "))
	}
	return nil
}

// quietValue runs sql on b, unseen by the client, and returns the first
// column of its last row, or the first error.
func (c *clientConn) quietValue(b *backendSession, sql string) (string, error) {
	var first error
	value := ""
	_, err := c.run(b, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: queryMessage(sql)}, func(chunk []byte, _ bool) error {
		return backendMessages(chunk, func(typ byte, msg []byte) error {
			switch typ {
			case 'E':
				if first == nil {
					first = parseError(msg)
				}
			case 'D':
				if row, err := decodeDataRow(msg); err == nil && len(row) > 0 {
					value = row[0]
				}
			}
			return nil
		})
	})
	if err == nil {
		err = first
	}
	return value, err
}

// xactCommitted asks the commit point whether its transaction xid
// committed; known is false when it cannot say for good (it is still in
// progress: a commit waiting for its synchronous replica on a backend the
// router lost; or the shard cannot be asked).
func (c *clientConn) xactCommitted(ctx context.Context, shard, xid string) (committed, known bool) {
	b, err := c.session(ctx, shard, false)
	if err != nil {
		return false, false
	}
	status, err := c.quietValue(b, "SELECT pg_catalog.pg_xact_status("+pgwire.QuoteLiteral(xid)+"::xid8)")
	if err != nil {
		return false, false
	}
	switch status {
	case "committed":
		return true, true
	case "aborted":
		return false, true
	}
	return false, false
}

// The steps of an atomic commit at which tests stop a router process
// (commitStep).
const (
	stepPrepared            = "prepared"              // every participant prepared; nothing decided
	stepRecorded            = "recorded"              // extended protocol: decision row written, commit point not committed
	stepCommitPointAnswered = "commit-point-answered" // extended protocol: the client's COMMIT ran on the commit point
	stepDecided             = "decided"               // the outcome is known; COMMIT/ROLLBACK PREPARED not sent
	stepFinished            = "finished"              // the prepared parts are finished; the client not yet answered
)

// commitStepHook, when set (only by tests, before the router starts: see
// export_test.go), is called at each step of an atomic commit, so that a
// test can kill the router's process there as a crash would.
var commitStepHook func(step string)

func commitStep(step string) {
	if commitStepHook != nil {
		commitStepHook(step)
	}
}
