package router

import (
	"context"
	"slices"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// txState is the client's transaction as the router sees it. A BEGIN is
// not sent anywhere until the first statement picks a shard; each shard
// the transaction reaches gets the same BEGIN first. A transaction on one
// shard is an ordinary Postgres transaction; one that wrote on several
// commits with two-phase commit (atomic.go) unless tessera.commit is
// best_effort, which commits on each in turn; tessera.tx_mode single
// refuses a second shard.
type txState struct {
	active bool
	failed bool
	// routerFailed: the router raised the error that failed the
	// transaction, so the shards still have it open and healthy and must
	// be rolled back rather than sent the client's COMMIT.
	routerFailed bool
	begin        string   // the BEGIN statement to replay on each shard
	shards       []string // shards with the transaction open, in order joined
	// wrote are the shards of the transaction where a statement other
	// than a plain read ran, in order: with two or more, COMMIT is a
	// two-phase commit under tessera.commit atomic (atomic.go).
	wrote []string
	// scoped are the statements that shaped the transaction on every
	// shard it has (SAVEPOINT, RELEASE, ROLLBACK TO, SET LOCAL), in
	// order: a shard that joins later runs them after its BEGIN, so that
	// it has the same savepoints and local settings as the others.
	scoped   []string
	replica  bool // the transaction runs on replicas (tessera.target)
	settings *sessionSettings
	// ddl: the transaction ran DDL, which the schema cache (read outside
	// it) cannot see until it commits: plans are made without trusting
	// it, and its end clears it again.
	ddl bool
}

// forgetTx drops the transaction's state once it has ended on its shards.
func (c *clientConn) forgetTx() {
	if c.tx.ddl {
		c.srv.schemaChanged()
		c.srv.announceSchemaChange(c.database)
	}
	c.tx = txState{}
}

func (t *txState) has(shard string) bool {
	for _, s := range t.shards {
		if s == shard {
			return true
		}
	}
	return false
}

// noteWrites records that a statement that may write ran on those of
// shards the transaction has.
func (t *txState) noteWrites(shards []string) {
	for _, s := range shards {
		if t.has(s) && !slices.Contains(t.wrote, s) {
			t.wrote = append(t.wrote, s)
		}
	}
}

// status is the transaction status ReadyForQuery reports.
func (c *clientConn) status() byte {
	switch {
	case c.tx.failed:
		return 'E'
	case c.tx.active:
		return 'T'
	}
	return 'I'
}

// beginTx opens a transaction in the router.
func (c *clientConn) beginTx(sql string) {
	if c.tx.active {
		c.out = appendMsg(c.out, 'N', []byte("SWARNING\x00VWARNING\x00C25001\x00Mthere is already a transaction in progress\x00\x00"))
		c.out = appendCommandComplete(c.out, "BEGIN")
		return
	}
	saved := c.settings
	c.tx = txState{active: true, begin: sql, settings: &saved, replica: c.settings.replica()}
	c.out = appendCommandComplete(c.out, "BEGIN")
}

// joinTx makes sure the transaction is open on shard.
func (c *clientConn) joinTx(ctx context.Context, b *backendSession) error {
	if !c.tx.active || c.tx.has(b.shard) {
		return nil
	}
	if len(c.tx.shards) > 0 && c.settings.txMode == "single" {
		return pgerr.New(pgerr.FeatureNotSupported,
			"tessera.tx_mode is single: this transaction runs on shard %s and the statement needs shard %s", c.tx.shards[0], b.shard)
	}
	begin := c.tx.begin
	if len(c.tx.scoped) > 0 {
		begin += ";\n" + strings.Join(c.tx.scoped, ";\n")
	}
	if _, _, err := c.quiet(b, &pb.Batch{Mode: pb.Mode_TRANSACTION, Frontend: queryMessage(begin)}); err != nil {
		return err
	}
	c.tx.shards = append(c.tx.shards, b.shard)
	return nil
}

// quiet runs a batch whose answer the client does not see. It returns how
// the batch ended, its last CommandComplete tag, and the first error the
// shard reported or the failure to reach it.
func (c *clientConn) quiet(b *backendSession, batch *pb.Batch) (sidecar.Result, string, error) {
	var first error
	tag := ""
	res, err := c.run(b, batch, func(chunk []byte, _ bool) error {
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
	if err == nil {
		err = first
	}
	return res, tag, err
}

// endTx commits or rolls back on every shard of the transaction. With
// several shards a failure on one after others committed is reported
// naming the shards: cross-shard commit is not atomic.
func (c *clientConn) endTx(ctx context.Context, sql string, commit bool) error {
	if !c.tx.active {
		tag := "COMMIT"
		if !commit {
			tag = "ROLLBACK"
		}
		c.out = appendMsg(c.out, 'N', []byte("SWARNING\x00VWARNING\x00C25P01\x00Mthere is no transaction in progress\x00\x00"))
		c.out = appendCommandComplete(c.out, tag)
		return nil
	}
	failed := c.tx.failed
	if failed {
		// Postgres answers COMMIT in a failed transaction by rolling it
		// back. The shards that did not fail (the router failed it, or
		// another shard did) would commit: each gets ROLLBACK instead.
		commit = false
		chain := chained(sql)
		sql = "ROLLBACK"
		if chain {
			sql += " AND CHAIN"
		}
	}
	if commit && c.needsAtomicCommit() {
		return c.endAtomic(ctx, sql)
	}
	q := queryMessage(sql)
	var done []string
	var firstErr error
	tag := ""
	stillOpen := true // COMMIT AND CHAIN leaves every shard in a new transaction
	for _, shard := range c.tx.shards {
		b, err := c.session(ctx, shard, c.tx.replica)
		if err == nil {
			var res sidecar.Result
			res, tag, err = c.quiet(b, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: q})
			stillOpen = stillOpen && err == nil && res.TxStatus == pb.TxStatus_IN_TRANSACTION
		}
		if err != nil && firstErr == nil {
			firstErr = err
		}
		if firstErr != nil {
			if len(done) > 0 && commit {
				firstErr = pgerr.New(pgerr.Code(firstErr), "%v (shards %s already committed; cross-shard commit is not atomic)", firstErr, strings.Join(done, ", "))
			}
			break
		}
		done = append(done, shard)
	}
	restore := c.tx.settings
	if stillOpen && firstErr == nil && len(c.tx.shards) > 0 {
		c.tx.failed = false
		c.out = appendCommandComplete(c.out, tag)
		return nil
	}
	c.forgetTx()
	if !commit && restore != nil {
		// Settings changed in a rolled-back transaction revert.
		c.settings.list = restore.list
	}
	if firstErr != nil {
		return firstErr
	}
	if tag == "" {
		tag = "COMMIT"
		if !commit {
			tag = "ROLLBACK"
		}
	}
	c.out = appendCommandComplete(c.out, tag)
	return nil
}

// endAtomic answers a client's COMMIT (sql) of a transaction that wrote
// on several shards with a two-phase commit (atomic.go); AND CHAIN opens
// the next transaction as its BEGIN did.
func (c *clientConn) endAtomic(ctx context.Context, sql string) error {
	begin, replica, saved := c.tx.begin, c.tx.replica, c.tx.settings
	warning, err := c.commitAtomicSimple(ctx)
	c.forgetTx()
	if err != nil {
		if saved != nil {
			// Settings changed in a rolled-back transaction revert.
			c.settings.list = saved.list
		}
		return err
	}
	if warning != "" {
		c.out = appendWarning(c.out, warning)
	}
	if chained(sql) {
		c.tx = txState{active: true, begin: begin, settings: saved, replica: replica}
	}
	c.out = appendCommandComplete(c.out, "COMMIT")
	return nil
}

// endOthers commits or rolls back the transaction on every shard but the
// first, which the client's own batch ends.
func (c *clientConn) endOthers(commit bool) error {
	sql := "ROLLBACK"
	if commit && !c.tx.failed {
		sql = "COMMIT"
	}
	q := queryMessage(sql)
	for _, shard := range c.tx.shards[1:] {
		b, err := c.session(context.Background(), shard, c.tx.replica)
		if err == nil {
			_, _, err = c.quiet(b, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: q})
		}
		if err != nil {
			return shardError(shard, err)
		}
	}
	c.tx.shards = c.tx.shards[:1]
	return nil
}

// onTxShards runs SAVEPOINT, RELEASE, ROLLBACK TO, SET TRANSACTION, SET
// LOCAL or SET on every shard of the open transaction (the first one's
// answer goes to the client) and keeps it, but a session SET (which
// reaches later shards with the session's settings), for shards that
// join later. In a transaction that
// has no shard yet it runs where r says, which joins that shard. In a
// failed transaction only ROLLBACK TO may run; once it ran everywhere the
// transaction is healthy again, as on one Postgres.
func (c *clientConn) onTxShards(ctx context.Context, r *routed, frontend []byte, prepared []*pb.PreparedStatement) (bool, error) {
	if c.tx.failed && !r.rollbackTo {
		c.out = appendError(c.out, "ERROR", errAborted)
		return true, nil
	}
	rr := *r
	if len(c.tx.shards) > 0 {
		rr.mode, rr.shards = routeEverywhere, append([]string(nil), c.tx.shards...)
		if len(rr.shards) == 1 {
			rr.mode = routeOne
		}
	}
	failed, err := c.execute(ctx, &rr, frontend, prepared, true)
	if err != nil || failed || !c.tx.active {
		return failed, err
	}
	if r.kind != kindSet || r.setLocal {
		c.tx.scoped = append(c.tx.scoped, r.sql)
	}
	if r.rollbackTo {
		c.tx.failed, c.tx.routerFailed = false, false
	}
	return false, nil
}

// failOn makes the transaction's part on shard fail, if it has not.
func (c *clientConn) failOn(shard string) error {
	b, err := c.session(context.Background(), shard, c.tx.replica)
	if err != nil {
		return err
	}
	const fail = "DO $$BEGIN RAISE EXCEPTION 'the transaction failed on another shard'; END$$"
	res, _, _ := c.quiet(b, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: queryMessage(fail)})
	if res.TxStatus != pb.TxStatus_FAILED {
		return pgerr.New(pgerr.InternalError, "could not fail the transaction before COMMIT")
	}
	return nil
}
