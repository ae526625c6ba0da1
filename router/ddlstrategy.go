package router

import (
	"context"
	"fmt"

	"github.com/tesseradb/tessera/ddl"
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/router/planner"
)

// OnlineDDL starts and follows OnlineDDL migrations for sessions that SET
// tessera.ddl_strategy to 'online' or 'online_wait', as Vitess's
// ddl_strategy does. The router does not talk to Temporal itself: the
// command that runs it gives it one (workflows/launch).
type OnlineDDL interface {
	// StartOnlineDDL starts the migration of one schema change of
	// database and returns its workflow and run ids. When another
	// migration of the same table runs, wait says whether to queue
	// behind it; without wait it is refused (SQLSTATE 55006).
	StartOnlineDDL(ctx context.Context, database, sql string, wait bool) (id, runID string, err error)
	// WaitOnlineDDL waits for a migration to end; its error carries a
	// SQLSTATE.
	WaitOnlineDDL(ctx context.Context, id, runID string) error
}

// DDL strategies, the values of tessera.ddl_strategy.
const (
	ddlDirect     = "direct"      // DDL runs on every shard as written (the default)
	ddlOnline     = "online"      // a schema change of one table starts an OnlineDDL migration and answers its id at once
	ddlOnlineWait = "online_wait" // the same, answered when the migration has ended
)

// onlineTarget reports whether, under the session's ddl_strategy, the DDL
// statement sql becomes an OnlineDDL migration: a schema change of one
// table (ALTER TABLE, a rename, CREATE or DROP INDEX). Other DDL
// (CREATE TABLE, DROP TABLE...) runs as written whatever the strategy. A
// change OnlineDDL refuses (two tables in one ALTER, say) is refused here,
// with its reason, rather than run in a way the session did not ask for.
func onlineTarget(sql string) (bool, error) {
	c, err := ddl.Classify(sql, nil)
	if err != nil {
		return false, nil // the planner's error stands
	}
	if c.Table == "" && c.Index == "" {
		// Not a change of one table or index (CREATE TABLE, DROP TABLE,
		// several statements...): it runs as written.
		return false, nil
	}
	if c.Path == ddl.Refused {
		return false, pgerr.New(pgerr.FeatureNotSupported, "tessera.ddl_strategy %q cannot run this statement: %s", ddlOnline, c.Reason())
	}
	return true, nil
}

// onlineDDL starts the migration of r's statement and answers its id as
// a one-row result with a NOTICE, at once ('online') or once it has
// ended ('online_wait'). It returns whether the statement failed.
func (c *clientConn) onlineDDL(ctx context.Context, r *routed) bool {
	fail := func(err error) bool {
		c.out = appendError(c.out, "ERROR", err)
		c.failTx()
		return true
	}
	if c.tx.active {
		return fail(pgerr.New(pgerr.ActiveSQLTransaction, "a schema change with tessera.ddl_strategy %q cannot run inside a transaction block", c.settings.ddlStrategy))
	}
	starter := c.srv.cfg.OnlineDDL
	if starter == nil {
		return fail(pgerr.New(pgerr.FeatureNotSupported, "tessera.ddl_strategy %q needs a router that reaches Temporal (tessera router --temporal)", c.settings.ddlStrategy))
	}
	wait := c.settings.ddlStrategy == ddlOnlineWait
	id, runID, err := starter.StartOnlineDDL(ctx, c.database, r.sql, wait)
	if err != nil {
		return fail(err)
	}
	if !wait {
		c.out = pgwire.AppendNotice(c.out, fmt.Sprintf("OnlineDDL migration %s started (run %s): follow it with tessera onlineddl show %s", id, runID, id))
	} else {
		if err := starter.WaitOnlineDDL(ctx, id, runID); err != nil {
			return fail(err)
		}
		c.out = pgwire.AppendNotice(c.out, fmt.Sprintf("OnlineDDL migration %s (run %s) completed", id, runID))
	}
	c.out = appendRowDescription(c.out, "migration_id", "run_id")
	c.out = appendDataRow(c.out, id, runID)
	c.out = appendCommandComplete(c.out, "SELECT 1")
	return false
}

// onlineInString refuses a string of several statements that holds a
// schema change the session's ddl_strategy makes a migration: Postgres
// runs such a string in one transaction, which a migration cannot join.
func onlineInString(stmts []*plannedStmt) error {
	for _, st := range stmts {
		if st.Kind != planner.DDL {
			continue
		}
		if online, err := onlineTarget(st.SQL); online || err != nil {
			return pgerr.New(pgerr.ActiveSQLTransaction, "a schema change with tessera.ddl_strategy online cannot run inside a transaction block: send it alone")
		}
	}
	return nil
}
