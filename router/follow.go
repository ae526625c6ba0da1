package router

import (
	"strings"

	"github.com/tesseradb/tessera/router/planner"
)

// Relations that exist on the authoritative shard only. A temporary
// table, view, sequence or index lives in the session's backend there
// (the session is pinned to it), and so does what Postgres makes
// temporary because it depends on one (a view over a temporary table, an
// index on one), and a table made by CREATE TABLE AS EXECUTE of a
// statement the session prepared there. DDL runs on every shard, but DDL that names one of these
// runs only on the authoritative shard, where it exists: the other shards
// would answer that the relation does not exist. The session follows its
// own such relations by name, from the statements it ran successfully.

// authOnly returns the authoritative shard when the DDL names a relation
// the session knows to exist only there.
func (c *clientConn) authOnly(st *plannedStmt) (string, bool) {
	if len(c.authRels) == 0 {
		return "", false
	}
	for _, t := range st.Tables {
		if c.authRels[t.Table] || strings.HasPrefix(t.Schema, "pg_temp") {
			shard, err := c.authoritativeShard()
			return shard, err == nil
		}
	}
	return "", false
}

// noteRelations records what a DDL statement that ran without error
// created or dropped; onAuthOnly says it ran only on the authoritative
// shard because it names a relation that exists only there.
func (c *clientConn) noteRelations(st *plannedStmt, onAuthOnly bool) {
	if st.Drops {
		for _, t := range st.Tables {
			delete(c.authRels, t.Table)
		}
		return
	}
	made := onAuthOnly || st.SessionState&planner.TempTable != 0 || st.Route == planner.Authoritative
	if st.Creates == "" || !made {
		return
	}
	if c.authRels == nil {
		c.authRels = map[string]bool{}
	}
	c.authRels[st.Creates] = true
}

// noteCursor records the shard a cursor was declared on. A cursor ends
// with its transaction (or, WITH HOLD, with the session); a stale entry
// sends FETCH where Postgres answers that the cursor does not exist.
func (c *clientConn) noteCursor(name, shard string) {
	if c.cursors == nil {
		c.cursors = map[string]string{}
	}
	c.cursors[name] = shard
}

// noteSuccess records what a statement that ran without error leaves for
// the session to follow: the relations DDL made or dropped, a cursor, the
// prepared statements DEALLOCATE dropped.
func (c *clientConn) noteSuccess(r *routed) {
	if r.relations != nil {
		c.noteRelations(r.relations, r.onAuthOnly)
	}
	if r.declares != "" {
		c.noteCursor(r.declares, r.shards[0])
	}
	if r.deallocates {
		c.deallocated(r.deallocName)
	}
}

// deallocated forgets a statement DEALLOCATE dropped, or (name empty)
// every one, after DEALLOCATE ALL or DISCARD ALL, which drop the
// statements of the protocol too (the shards know them by other names).
// The simple protocol's DEALLOCATE of a statement of the protocol is the
// router's to answer (kindDeallocate); in the extended protocol it
// succeeds on a pinned backend that had it under the client's name.
func (c *clientConn) deallocated(name string) {
	if name != "" {
		if p := c.stmts[name]; p != nil {
			c.forgetOwn(p)
			delete(c.stmts, name)
		}
		return
	}
	for _, p := range c.stmts {
		c.forgetOwn(p)
	}
	clear(c.stmts)
}
