package router

import (
	"context"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/router/planner"
)

// simpleQuery serves a Query message, which may hold several statements.
// The common case, one statement for one shard, forwards the client's
// message as it arrived. Otherwise each statement runs in turn, as Postgres
// runs them, stopping at the first error.
func (c *clientConn) simpleQuery(msg []byte) error {
	ctx := context.Background()
	if len(msg) < 6 || msg[len(msg)-1] != 0 {
		return pgerr.New(pgerr.ProtocolViolation, "invalid Query message")
	}
	sql := string(msg[5 : len(msg)-1])
	var hold tableHold
	rewrites := 0 // of rewriteQuery's, done
plan:
	for {
		stmts, revision, err := c.plan(sql, nil)
		for err == nil && rewrites < queryRewrites {
			act, err := c.rewriteQuery(ctx, rewrites, stmts)
			rewrites++
			switch {
			case err != nil:
				c.out = appendError(c.out, "ERROR", err)
				c.failTx()
				c.out = appendReady(c.out, c.status())
				return nil
			case act.answered:
				c.out = appendReady(c.out, c.status())
				return nil
			case act.sql != "":
				sql, msg = act.sql, queryMessage(act.sql)
				continue plan
			}
		}
		if err == nil && c.placesAnew() {
			waited, err := c.srv.buffers.holdForTables(ctx, stmts, &hold)
			if err != nil {
				c.out = appendError(c.out, "ERROR", err)
				c.failTx()
				c.out = appendReady(c.out, c.status())
				return nil
			}
			if waited {
				// Plan it again: the topology has probably moved the
				// tables while it waited.
				continue
			}
		}
		err = c.runQuery(ctx, msg, sql, stmts, err)
		if err != errCutoverFenced {
			return err
		}
		// A cutover's fence refused the statement and nothing ran: wait
		// for the topology that moves its table, then plan it again.
		if err := c.srv.buffers.waitAfterFence(ctx, c.srv.topo, revision, stmts, &hold); err != nil {
			c.out = appendError(c.out, "ERROR", err)
			c.out = appendReady(c.out, c.status())
			return nil
		}
	}
}

// routerAnswers reports whether a string holds a statement the router
// answers itself, which the one shard would not know: EXPLAIN (TESSERA)
// and SHOW tessera.*. Such a string runs statement by statement even when
// the topology has one shard.
func routerAnswers(stmts []*plannedStmt) bool {
	for _, st := range stmts {
		if st.Kind == planner.ExplainTessera || st.Kind == planner.Show && strings.HasPrefix(strings.ToLower(st.Name), "tessera.") {
			return true
		}
	}
	return false
}

// queryRewrites counts rewriteQuery's rewrites.
const queryRewrites = 2

// rewriteQuery makes rewrite i of a Query's planned statements, which
// each run once, in order, the Query planned again after one rewrites
// it: INSERT ... SELECT made INSERT ... VALUES (insertselect.go), then
// the sequence values the router serves filled in (sequence_insert.go).
func (c *clientConn) rewriteQuery(ctx context.Context, i int, stmts []*plannedStmt) (sequenceAction, error) {
	if i == 0 {
		if len(stmts) != 1 {
			return sequenceAction{}, nil
		}
		return c.expandInsertSelect(ctx, stmts[0])
	}
	return c.sequencesOf(ctx, stmts)
}

// placesAnew reports whether the next statement starts somewhere new: no
// transaction is open on a shard. The router opens a transaction lazily,
// on the shard of its first statement after BEGIN, so a BEGIN'd
// transaction that has run nothing yet may still wait for a table
// buffer and go to the tables' new shards.
func (c *clientConn) placesAnew() bool {
	return !c.tx.active || len(c.tx.shards) == 0
}

// runQuery runs a Query's planned statements (err is the planning's).
// It returns errCutoverFenced, having answered nothing, when a cutover's
// fence refused its only statement outside a transaction.
func (c *clientConn) runQuery(ctx context.Context, msg []byte, sql string, stmts []*plannedStmt, err error) error {
	if pgerr.Code(err) == "42601" {
		// Let Postgres itself report the syntax error, with its position
		// and hints; it also parses what depends on session settings
		// (standard_conforming_strings = off) that the planner cannot.
		r := c.authoritativeRoute()
		if _, err := c.statement(ctx, &r, msg); err != nil {
			return err
		}
		if c.copyIn == nil {
			c.out = appendReady(c.out, c.status())
		}
		return nil
	}
	if err != nil {
		c.out = appendError(c.out, "ERROR", err)
		c.failTx()
		c.out = appendReady(c.out, c.status())
		return nil
	}
	if len(stmts) == 0 {
		c.out = appendMsg(c.out, 'I')
		c.out = appendReady(c.out, c.status())
		return nil
	}
	if len(stmts) > 1 && c.settings.onlineDDL() {
		if err := onlineInString(stmts); err != nil {
			c.out = appendError(c.out, "ERROR", err)
			c.failTx()
			c.out = appendReady(c.out, c.status())
			return nil
		}
	}
	if len(stmts) == 1 || c.onlyShard() != "" && !routerAnswers(stmts) || c.sameShard(stmts) {
		// The whole string goes to one shard as it came: Postgres keeps its
		// implicit-transaction semantics.
		r := c.route(stmts[0], nil)
		var failed bool
		if len(stmts) > 1 {
			r = c.combined(stmts, sql)
			failed, err = c.statement(ctx, &r, msg)
		} else {
			// Alone and outside a transaction, it may be planned again
			// if a cutover's fence refuses it.
			r.replannable = !c.tx.active && r.mode == routeOne
			failed, err = c.simpleStatement(ctx, &r, stmts[0], msg)
		}
		if err != nil {
			return err
		}
		if !failed {
			for _, s := range r.sets {
				c.recordSetting(s)
			}
		}
	} else {
		// Postgres runs a string's statements in one implicit
		// transaction: a failure undoes those before it. Outside a
		// transaction the router opens one for the string (its BEGIN
		// and COMMIT are not the client's to see), unless the string
		// controls transactions itself.
		implicit := !c.tx.active && implicitTx(stmts)
		if implicit {
			saved := c.settings
			c.tx = txState{active: true, begin: "BEGIN", settings: &saved, replica: c.settings.replica()}
		}
		failed := false
		for _, st := range stmts {
			if st.Kind == planner.Copy {
				c.out = appendError(c.out, "ERROR", pgerr.New(pgerr.FeatureNotSupported, "COPY in a query string whose statements run on different shards is not supported; send it alone"))
				c.failTx()
				failed = true
				break
			}
			var done bool
			if st, done, failed = c.insertSelectInString(ctx, st); done {
				if failed {
					break
				}
				continue
			}
			r := c.route(st, nil)
			// Postgres stops at the string's first error: so must the
			// router, which needs to see it.
			r.scan = true
			var err error
			failed, err = c.statement(ctx, &r, queryMessage(r.sql))
			if err != nil {
				return err
			}
			if failed {
				break
			}
		}
		if implicit && c.tx.active {
			mark := len(c.out)
			sql := "COMMIT"
			if failed || c.tx.failed {
				sql = "ROLLBACK"
			}
			err := c.endTx(ctx, sql, sql == "COMMIT")
			c.out = c.out[:mark]
			if err != nil {
				c.out = appendError(c.out, "ERROR", err)
			}
		}
	}
	if c.copyIn == nil {
		c.out = appendReady(c.out, c.status())
	}
	return nil
}

// implicitTx reports whether the router should run a string of
// statements for several shards in a transaction of its own: not when a
// statement controls transactions (Postgres's own rules for those in a
// string then apply on each shard) or cannot run in a transaction block.
func implicitTx(stmts []*plannedStmt) bool {
	for _, st := range stmts {
		if st.Kind == planner.Transaction || st.NoTransaction {
			return false
		}
	}
	return true
}

// statement runs one routed statement of a simple query: the router
// answers transaction control, SET and Tessera's own statements itself;
// the rest runs on shards.
func (c *clientConn) statement(ctx context.Context, r *routed, frontend []byte) (bool, error) {
	if r.err != nil {
		c.out = appendError(c.out, "ERROR", r.err)
		c.failTx()
		return true, nil
	}
	switch r.kind {
	case kindEmpty:
		c.out = appendMsg(c.out, 'I')
		return false, nil
	case kindBegin:
		if c.tx.failed {
			c.out = appendError(c.out, "ERROR", errAborted)
			return true, nil
		}
		c.beginTx(r.sql)
		return false, nil
	case kindCommit, kindRollback:
		if !c.tx.active {
			// Let Postgres answer a COMMIT outside a transaction (a
			// warning, or an error for AND CHAIN) in its own words.
			ar := c.authoritativeRoute()
			return c.execute(ctx, &ar, frontend, nil, r.scan)
		}
		if err := c.endTx(ctx, r.sql, r.kind == kindCommit); err != nil {
			c.out = appendError(c.out, "ERROR", err)
			return true, nil
		}
		return false, nil
	case kindTxOther:
		if c.tx.active {
			return c.onTxShards(ctx, r, frontend, nil)
		}
	case kindTesseraSet:
		if err := c.recordSetting(r); err != nil {
			c.out = appendError(c.out, "ERROR", err)
			c.failTx()
			return true, nil
		}
		c.out = appendCommandComplete(c.out, "SET")
		return false, nil
	case kindTesseraShow:
		v, err := c.settings.showTessera(r.setName)
		if err != nil {
			c.out = appendError(c.out, "ERROR", err)
			c.failTx()
			return true, nil
		}
		c.out = appendRowDescription(c.out, r.setName)
		c.out = appendDataRow(c.out, v)
		c.out = appendCommandComplete(c.out, "SHOW")
		return false, nil
	case kindDeallocate:
		// A statement of the protocol: shards know it by its content
		// name, so the router forgets it and answers.
		if c.tx.failed {
			c.out = appendError(c.out, "ERROR", errAborted)
			return true, nil
		}
		c.deallocated(r.deallocName)
		c.out = appendCommandComplete(c.out, "DEALLOCATE")
		return false, nil
	case kindOnlineDDL:
		return c.onlineDDL(ctx, r), nil
	case kindExplain:
		if r.analyze != nil {
			return c.explainAnalyze(ctx, r.analyze, r.explain)
		}
		c.out = appendRowDescription(c.out, "QUERY PLAN")
		for _, line := range r.explain {
			c.out = appendDataRow(c.out, line)
		}
		c.out = appendCommandComplete(c.out, "EXPLAIN")
		return false, nil
	}
	var failed bool
	var err error
	if r.kind == kindSet && c.tx.active {
		// The shards of an open transaction keep their backends until it
		// ends: each gets the SET now (a later one gets the session's
		// settings, or the SET LOCAL, when it joins).
		failed, err = c.onTxShards(ctx, r, frontend, nil)
	} else {
		failed, err = c.execute(ctx, r, frontend, nil, r.scan || r.kind == kindSet || len(r.sets) > 0)
	}
	if err != nil || failed {
		return failed, err
	}
	if r.kind == kindSet && !r.setLocal {
		c.recordSetting(r)
	}
	c.noteSuccess(r)
	return false, nil
}

// recordSetting keeps a successful SET or RESET for the session. Tessera's
// own settings are checked and kept by the router, and also sent with the
// session's settings so that a shard can SHOW them.
func (c *clientConn) recordSetting(r *routed) error {
	if r.kind == kindTesseraSet {
		if err := c.settings.setTessera(r.setName, r.setValue); err != nil {
			return err
		}
	}
	if r.setLocal {
		return nil
	}
	if r.reset {
		c.settings.reset(r.setName)
		return nil
	}
	c.settings.set(r.setName, r.setValue)
	return nil
}

// insertSelectInString returns st, or, when st is an INSERT ... SELECT
// the router runs (insertselect.go), the INSERT ... VALUES made of it
// with its sequence values filled in, in a string of statements run one
// by one. It expands it when its turn comes, so that its SELECT sees
// what the statements before it wrote. done: the router answered st
// itself (its SELECT failed, it inserts no row, or it could not be
// made), and failed says whether with an error.
func (c *clientConn) insertSelectInString(ctx context.Context, st *plannedStmt) (_ *plannedStmt, done, failed bool) {
	fail := func(err error) (*plannedStmt, bool, bool) {
		c.out = appendError(c.out, "ERROR", err)
		c.failTx()
		return nil, true, true
	}
	act, err := c.expandInsertSelect(ctx, st)
	switch {
	case err != nil:
		return fail(err)
	case act.answered:
		return nil, true, act.failed
	case act.sql == "":
		return st, false, false
	}
	st, err = c.planOne(act.sql)
	if err != nil {
		return fail(err)
	}
	// Its sequence values, as rewriteQuery fills them in (an INSERT is
	// filled in, never answered).
	fill, err := c.serveSequences(ctx, st)
	if err == nil && fill.sql != "" {
		st, err = c.planOne(fill.sql)
	}
	if err != nil {
		return fail(err)
	}
	return st, false, false
}

// planOne plans sql, one statement the router made.
func (c *clientConn) planOne(sql string) (*plannedStmt, error) {
	stmts, _, err := c.plan(sql, nil)
	if err != nil {
		return nil, err
	}
	if len(stmts) != 1 {
		return nil, pgerr.New(pgerr.InternalError, "the router's statement planned as %d statements", len(stmts))
	}
	return stmts[0], nil
}
