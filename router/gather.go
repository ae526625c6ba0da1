package router

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/router/planner"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// Gather and compute (planner/gather.go decides, this runs it): a read
// the shards cannot answer alone is computed by Postgres over the rows
// it reads.
//
//   - Where: on the authoritative shard's primary, in a backend of its
//     own (a second stream of the client's session to that sidecar,
//     opened as the client's role like every other, carrying the
//     client's cancel key and settings), inside a transaction opened for
//     the statement: BEGIN READ WRITE, one CREATE TEMP TABLE ... ON
//     COMMIT DROP per table read, COPY FROM STDIN into each, the
//     statement over them, ROLLBACK. The temporary tables live only in
//     that transaction, on a backend the client's own statements never
//     use, so the client never sees them and nothing is left behind
//     after an error or a cancel (the rollback, or the sidecar's reset
//     of a stream that broke, drops them). The client's own
//     transaction never touches a temporary object, so its two-phase
//     commit is unaffected.
//   - Pulls: each table's rows come from its shards through the
//     client's own backends (in its transaction when one is open, so
//     they see its writes), as COPY (SELECT cols FROM t WHERE pushed
//     filters) TO STDOUT in binary: exact whatever the settings, and
//     the same types on every shard. Each CopyData goes on to the
//     computing backend's COPY as it arrives, at most copyBatch bytes
//     at a time: rows are never held whole in the router. Privileges
//     apply on the shards (SELECT on the table and its columns, row
//     security) and on the computing shard (its CREATE TEMP TABLE reads
//     the table's definition and needs TEMP on the database).
//   - Snapshots: each pull is its own statement on its shard. Outside a
//     transaction, the shards' rows come from several snapshots, taken
//     one after another; in a REPEATABLE READ transaction, from each
//     shard's own transaction snapshot. As with Citus, a read across
//     shards is not one snapshot: a transaction committed on two shards
//     between two pulls may be seen on one and not the other.
//   - Bound: tessera.gather_limit (bytes of rows pulled for one
//     statement; default 256MB) refuses a statement that would pull
//     more, with 53400, and cancels the pull under way.

// defaultGatherLimit is tessera.gather_limit's default, in bytes.
const defaultGatherLimit = 256 << 20

// gatherLockTimeout bounds the computing transaction's wait for a lock
// on a table's definition (55P03 past it).
const gatherLockTimeout = "10s"

// analyzeRows: a temporary table given this many rows or more is
// indexed on the columns the statement equates (GatherTable.Indexes) and
// analyzed before the statement runs, so that Postgres plans joins and
// correlated subqueries over it as over the real tables.
const analyzeRows = 1000

// binaryCopyHeader is the header of COPY's binary format without
// options; binaryCopyTrailer ends it.
var (
	binaryCopyHeader  = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")
	binaryCopyTrailer = []byte{0xff, 0xff}
)

// routeGathered sets r to run by gathering.
func routeGathered(r *routed, g *planner.GatherPlan) {
	r.mode, r.gather, r.shards, r.allShards = routeGather, g, g.Shards(), true
	r.engine, r.limited = nil, false
}

// errGatherTooLarge refuses a statement that would pull more than the
// session's tessera.gather_limit.
func errGatherTooLarge(limit int64) error {
	return pgerr.New("53400", "the rows this statement reads from several shards exceed tessera.gather_limit (%s bytes); filter them by the shard key or raise the limit", strconv.FormatInt(limit, 10))
}

// gatherCompute answers r by gathering (above).
func (c *clientConn) gatherCompute(ctx context.Context, r *routed, frontend []byte, prepared []*pb.PreparedStatement) (bool, error) {
	g := r.gather
	final := queryMessage(g.SQL)
	if len(frontend) == 0 || frontend[0] != 'Q' {
		if r.shardStmt == nil {
			c.out = appendError(c.out, "ERROR", errEngineRebind)
			c.failTx()
			return true, nil
		}
		final = rebind(frontend, r.shardStmt.Name)
		prepared = append(append([]*pb.PreparedStatement(nil), prepared...), r.shardStmt)
	} else {
		prepared = nil
	}
	if g.TxTime && c.tx.active {
		c.out = appendError(c.out, "ERROR", pgerr.New(pgerr.FeatureNotSupported,
			"a statement across shards that reads the transaction's time or backend (now(), CURRENT_DATE, pg_backend_pid()...) inside a transaction is not supported yet"))
		c.failTx()
		return true, nil
	}
	if executeRowLimit(frontend) {
		// The computing transaction ends with the statement: a portal
		// suspended after some rows could not be resumed.
		c.out = appendError(c.out, "ERROR", pgerr.New(pgerr.FeatureNotSupported,
			"Execute with a row limit of a statement across shards that needs gathering is not supported yet"))
		c.failTx()
		return true, nil
	}
	if c.tx.ddl {
		// The computing backend would see the tables' definitions as
		// committed, not as the transaction changed them, and wait for
		// the locks the transaction's DDL holds.
		c.out = appendError(c.out, "ERROR", pgerr.New(pgerr.FeatureNotSupported,
			"a statement across shards that needs gathering, in a transaction that ran DDL, is not supported yet"))
		c.failTx()
		return true, nil
	}
	comp, err := c.computeSession(ctx, g.Compute)
	if err != nil {
		c.out = appendError(c.out, "ERROR", shardError(g.Compute, err))
		c.failTx()
		return true, nil
	}
	g2 := gathering{c: c, comp: comp, limit: c.settings.gatherLimitBytes()}
	g2.planLookups(g)
	defer g2.rollback()
	// The computing backend reads the tables' definitions: a lock the
	// client's own transaction holds on one (LOCK TABLE) would make it
	// wait for the client, which waits for it; lock_timeout ends that.
	setup := append([]string{"BEGIN READ WRITE", "SET LOCAL lock_timeout = '" + gatherLockTimeout + "'"}, c.txLocalSettings()...)
	for _, t := range g.Tables {
		setup = append(setup, t.Create)
	}
	if !g2.quiet(strings.Join(setup, "; ")) {
		return true, nil
	}
	for _, t := range g.Tables {
		if !g2.load(ctx, t) {
			return true, nil
		}
	}
	f := forwarder{c: c, scan: true}
	res, err := c.run(comp, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: final, Prepared: prepared}, f.emit)
	if err != nil {
		g2.broken = true
		if f.err != nil {
			return true, f.err
		}
		f.finish(true)
		c.out = appendError(c.out, "ERROR", shardError(g.Compute, err))
		c.failTx()
		return true, nil
	}
	if err := f.finish(res.CopyIn); err != nil {
		return true, err
	}
	if f.failed {
		c.failTx()
	}
	return f.failed, nil
}

// executeRowLimit reports an Execute in frontend with a row limit.
func executeRowLimit(frontend []byte) bool {
	limited := false
	backendMessages(frontend, func(typ byte, msg []byte) error {
		if typ != 'E' {
			return nil
		}
		_, off, err := cstring(msg, 5)
		if err == nil && off+4 <= len(msg) && binary.BigEndian.Uint32(msg[off:]) != 0 {
			limited = true
		}
		return nil
	})
	return limited
}

// txLocalSettings are the statements that gave the client's open
// transaction its local settings (SET LOCAL, and the savepoints that
// scope them), which the computing transaction replays so that the
// statement is computed with them; SET TRANSACTION, which would
// change the computing transaction's own mode, is left out.
func (c *clientConn) txLocalSettings() []string {
	var out []string
	for _, sql := range c.tx.scoped {
		if f := strings.Fields(strings.ToUpper(sql)); len(f) >= 2 && f[0] == "SET" && f[1] == "TRANSACTION" {
			continue
		}
		out = append(out, sql)
	}
	return out
}

// computeSession returns the client's second stream to shard's primary,
// the one gathers compute on, opening it on first use.
func (c *clientConn) computeSession(ctx context.Context, shard string) (*backendSession, error) {
	return c.sessionAt(ctx, shard+"\x00compute", shard, false, false)
}

// gathering is one gather's state on its computing backend.
type gathering struct {
	c      *clientConn
	comp   *backendSession
	limit  int64 // bytes
	pulled int64 // bytes pulled so far
	broken bool  // the computing stream failed: drop it rather than reuse it
	// lookups are the batched lookups' values by the looked-up table's
	// temporary table, sources the same by their source's
	// (gather_lookup.go).
	lookups map[string]*lookupKeys
	sources map[string][]*lookupKeys
}

// planLookups makes the collectors of p's batched lookups.
func (g *gathering) planLookups(p *planner.GatherPlan) {
	for _, t := range p.Tables {
		if t.Lookup == nil {
			continue
		}
		if g.lookups == nil {
			g.lookups, g.sources = map[string]*lookupKeys{}, map[string][]*lookupKeys{}
		}
		k := newLookupKeys(t.Lookup)
		g.lookups[t.Temp] = k
		g.sources[t.Lookup.From] = append(g.sources[t.Lookup.From], k)
	}
}

// run sends frontend to the computing backend and returns the answer's
// first error message, if any.
func (g *gathering) run(frontend []byte) (errMsg []byte, res sidecar.Result, err error) {
	res, err = g.comp.sess.RunLast(&pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: frontend, Settings: g.c.settings.list},
		func(chunk []byte, _ bool) error {
			return backendMessages(chunk, func(typ byte, msg []byte) error {
				if typ == 'E' && errMsg == nil {
					errMsg = append([]byte(nil), msg...)
				}
				return nil
			})
		})
	if err != nil {
		g.broken = true
	}
	return errMsg, res, err
}

// quiet runs sql on the computing backend; its error, if any, is the
// statement's.
func (g *gathering) quiet(sql string) bool {
	errMsg, _, err := g.run(queryMessage(sql))
	return g.ok(errMsg, err)
}

// ok reports success, or answers the client with the failure.
func (g *gathering) ok(errMsg []byte, err error) bool {
	switch {
	case err != nil:
		g.c.out = appendError(g.c.out, "ERROR", shardError(g.comp.shard, err))
	case errMsg != nil:
		g.c.out = append(g.c.out, errMsg...)
	default:
		return true
	}
	g.c.failTx()
	return false
}

// rollback ends the computing transaction, which drops its temporary
// tables; a stream that failed is closed instead (the sidecar rolls back
// and resets its backend).
func (g *gathering) rollback() {
	if !g.broken {
		if _, _, err := g.run(queryMessage("ROLLBACK")); err == nil {
			return
		}
	}
	g.c.dropSession(g.comp)
}

// parseGatherLimit reads tessera.gather_limit: bytes, or a number with
// kB, MB or GB.
func parseGatherLimit(value string) (int64, error) {
	v := strings.TrimSpace(strings.ToLower(value))
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"kb", 1 << 10}, {"mb", 1 << 20}, {"gb", 1 << 30}} {
		if strings.HasSuffix(v, u.suffix) {
			v, mult = strings.TrimSpace(strings.TrimSuffix(v, u.suffix)), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n <= 0 {
		return 0, errors.New("bad size")
	}
	return n * mult, nil
}
