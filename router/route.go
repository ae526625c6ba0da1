package router

import (
	"encoding/binary"
	"strconv"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/router/planner"
	"github.com/tesseradb/tessera/topo"
)

// plannedStmt is one statement's cached plan.
type plannedStmt = planner.Statement

// plan plans the statements of sql against the current topology, and
// says which revision of it that was.
func (c *clientConn) plan(sql string, oids []uint32) ([]*plannedStmt, int64, error) {
	stmts, revision, _, err := c.planView(sql, oids)
	return stmts, revision, err
}

// planView is plan that also says whether the statements were planned by
// the topology's replica reads (topo.Topology.ReplicaReads): a replica
// session's are while a data movement has switched its reads only.
func (c *clientConn) planView(sql string, oids []uint32) ([]*plannedStmt, int64, bool, error) {
	snap := c.srv.topo.Current()
	if snap == nil {
		return nil, 0, false, pgerr.New(pgerr.ConfigFileError, "no data topology is stored")
	}
	top, replica := c.view(snap.Topology)
	stmts, err := c.srv.planner.Plan(top, snap.Revision, c.srv.schema, planner.Input{
		SQL:        sql,
		Database:   c.database,
		SearchPath: c.searchPath(snap.Revision),
		ParamOIDs:  oids,
		// A snapshot of the catalog cannot see the transaction's DDL.
		UncommittedDDL: c.tx.ddl,
		ReplicaReads:   replica,
		NoGather:       c.settings.gather == "off",
	})
	c.stat.planned(stmts)
	return stmts, snap.Revision, replica, err
}

// view is the topology the session's statements route by: its replica
// reads' for a replica session when some group's replica reads are
// switched (replica is then true), else top. Without replica key ranges
// this is one pointer test.
func (c *clientConn) view(top *topo.Topology) (_ *topo.Topology, replica bool) {
	if top.HasReplicaReads() && c.settings.replica() {
		return top.ReplicaReads(), true
	}
	return top, false
}

// searchPath is the session's search_path. "$user" counts only when the
// topology lists a schema of that name: the router cannot see whether one
// exists on the shards, and without it Postgres skips the entry.
func (c *clientConn) searchPath(revision int64) []string {
	v, ok := c.settings.get("search_path")
	if !ok {
		v = `"$user", public`
	}
	// The same answer until the setting or the topology changes: not
	// worth recomputing for every statement.
	sp := &c.searchPathMemo
	if sp.valid && sp.revision == revision && sp.setting == v {
		return sp.path
	}
	var schemas map[string]bool
	if snap := c.srv.topo.Current(); snap != nil {
		if db := snap.Topology.Databases[c.database]; db != nil {
			schemas = map[string]bool{}
			for name := range db.Schemas {
				schemas[name] = true
			}
		}
	}
	var out []string
	for _, part := range strings.Split(v, ",") {
		part = strings.TrimSpace(part)
		if strings.HasPrefix(part, `"`) && strings.HasSuffix(part, `"`) && len(part) >= 2 {
			part = strings.ReplaceAll(part[1:len(part)-1], `""`, `"`)
		} else {
			part = strings.ToLower(part)
		}
		if part == "$user" {
			if !schemas[c.user] {
				continue
			}
			part = c.user
		}
		if part != "" {
			out = append(out, part)
		}
	}
	*sp = searchPathMemo{valid: true, revision: revision, setting: v, path: out}
	return out
}

// searchPathMemo is the last search_path a session resolved.
type searchPathMemo struct {
	valid    bool
	revision int64
	setting  string
	path     []string
}

// route resolves a planned statement's targets with the statement's text
// (for literal values) and the Bind parameters, if any.
func (c *clientConn) route(st *plannedStmt, params *bindParams) routed {
	if st == nil {
		return routed{kind: kindEmpty}
	}
	r := routed{sql: st.SQL, readOnly: st.ReadOnly, sessionState: st.SessionState != 0, err: st.Err}
	r.autocommit = st.Pipelinable()
	r.callsSequences = c.seqs.lastSeq != 0 && c.mayCallSequences(st)
	r.setsSequence = st.Kind == planner.Select && st.SideEffects && strings.Contains(strings.ToLower(st.SQL), "setval")
	switch st.Merge {
	case planner.MergeLimit:
		r.limit = limitValue(st.Limit, params)
		r.limited = r.limit >= 0
	case planner.MergeEngine:
		r.engine = st.Engine
	}
	if r.err != nil {
		if only := c.onlyShard(); only != "" && pgerr.Code(r.err) == pgerr.FeatureNotSupported {
			// With one shard in the whole topology nothing needs
			// distributing: the shard runs it exactly as Postgres would.
			r.err, r.mode, r.shards = nil, routeOne, []string{only}
			r.ddl = st.Kind == planner.DDL || st.Kind == planner.Utility
		}
		return r
	}
	switch st.Kind {
	case planner.Empty:
		r.kind = kindEmpty
		return r
	case planner.ExplainTessera:
		r.kind = kindExplain
		r.explain = st.Describe(params.planner())
		if st.Analyze {
			r.analyze = st
		}
		return r
	case planner.Transaction:
		// The simple protocol handles these in the router; the extended
		// protocol sends them to the transaction's first shard (or the
		// authoritative one) in the client's batch.
		r.mode, r.shards = routeOne, c.authoritativeRoute().shards
		switch st.Transaction {
		case planner.Begin:
			r.kind = kindBegin
		case planner.Commit:
			r.kind = kindCommit
		case planner.Rollback:
			r.kind = kindRollback
		case planner.Savepoint, planner.Release, planner.RollbackTo, planner.SetTransaction:
			r.kind, r.rollbackTo = kindTxOther, st.Transaction == planner.RollbackTo
		case planner.PrepareTransaction:
			r.err = c.clientPrepareRefusal(st.Name)
		}
		if r.kind != kindTxOther {
			return r
		}
	case planner.Set:
		if s := st.Setting; s != nil {
			if strings.HasPrefix(strings.ToLower(s.Name), "tessera.") {
				r.kind, r.setName, r.setValue, r.setLocal = kindTesseraSet, s.Name, s.Value, s.Local
				if s.Op != planner.SetValue {
					r.setValue, r.reset = "default", true
				}
				r.shards, r.mode = c.txOrAuthoritative(st.Targets), routeOne
				if len(r.shards) == 0 {
					r.shards = c.authoritativeRoute().shards
				}
				return r
			}
			switch s.Op {
			case planner.SetValue:
				r.kind, r.setName, r.setValue, r.setLocal = kindSet, s.Name, s.Value, s.Local
			case planner.Reset:
				r.kind, r.setName, r.reset, r.setLocal = kindSet, s.Name, true, s.Local
			case planner.ResetAll:
				r.kind, r.setName, r.reset = kindSet, "all", true
			}
		}
	case planner.Select:
		if s := st.Setting; s != nil && !strings.HasPrefix(s.Name, "tessera.") {
			// SELECT set_config('name', 'value', is_local): a SET whose
			// answer is a row.
			r.kind, r.setName, r.setValue, r.setLocal = kindSet, s.Name, s.Value, s.Local
		}
	case planner.Show:
		if strings.HasPrefix(strings.ToLower(st.Name), "tessera.") {
			// Answered by the router in the simple protocol; in the
			// extended protocol the shard answers from the session's
			// settings, which carry tessera.* once set.
			r.kind, r.setName = kindTesseraShow, st.Name
		}
	case planner.DDL:
		r.ddl = true
		r.roles = changesLogins(st.SQL)
		if c.settings.onlineDDL() {
			online, err := onlineTarget(st.SQL)
			if err != nil {
				r.err = err
				return r
			}
			if online {
				r.kind = kindOnlineDDL
				return r
			}
		}
	}
	if st.Deallocates && st.Name != "" && c.stmts[st.Name] != nil {
		r.kind = kindDeallocate
	}
	if c.routeKeyMove(&r, st, params) { // keymove.go
		return r
	}
	switch st.Route {
	case planner.Shard:
		shards, err := st.Shards(params.planner())
		if err == planner.ErrSplitInsert {
			// Rows for several shards: only now is a split worth making.
			c.routeSplit(&r, st, params)
			return r
		}
		if err != nil && st.Gather != nil && pgerr.Code(err) == pgerr.FeatureNotSupported {
			// Keys reaching several shards: computed by gathering.
			routeGathered(&r, st.Gather)
			return r
		}
		if err != nil {
			r.err = err
			return r
		}
		r.shards = shards
		r.mode = routeOne
		if len(shards) > 1 {
			r.mode = routeScatter
		}
	case planner.Scatter:
		r.shards, r.mode, r.allShards = st.Targets, routeScatter, true
		if st.CopyInto != nil {
			// Each row goes where its key routes.
			r.mode, r.copyInto, r.allShards = routeCopyInto, st.CopyInto, false
		} else if len(st.Targets) == 1 {
			r.mode = routeOne
		}
	case planner.Everywhere:
		r.shards, r.mode, r.elsewhere = st.Targets, routeEverywhere, st.Elsewhere
		if len(st.Targets) == 1 {
			r.mode = routeOne
		}
	case planner.Authoritative:
		r.shards, r.mode = c.fixedShard(st), routeOne
	case planner.Gathered:
		routeGathered(&r, st.Gather)
		return r
	default:
		r.shards, r.mode = c.txOrAuthoritative(nil), routeOne
		if shard, ok := c.cursors[st.Name]; ok && st.Kind == planner.Utility && st.Name != "" {
			// FETCH, MOVE, CLOSE: where the cursor was declared.
			r.shards = []string{shard}
		}
	}
	if len(r.shards) == 0 {
		ar := c.authoritativeRoute()
		r.shards = ar.shards
	}
	r.deallocates, r.deallocName = st.Deallocates, st.Name
	r.preparedView = st.SessionState&planner.PreparedView != 0
	if st.Declares && r.mode == routeOne {
		r.declares = st.Name
	}
	if st.Kind == planner.DDL {
		r.relations = st
		if shard, ok := c.authOnly(st); ok && r.mode == routeEverywhere {
			r.shards, r.mode, r.onAuthOnly = []string{shard}, routeOne, true
		}
	}
	return r
}

// fixedShard is where an Authoritative-route statement runs: the shard
// that owns its tables, whatever the transaction touched before. Only a
// statement that neither reads a table nor changes anything (SELECT 1,
// SELECT now(), SHOW) may run in the open transaction's first shard
// instead, so as not to add a shard to it: its answer is the same there,
// and a value that belongs to the backend or the transaction (now(),
// pg_backend_pid()) comes from the same shard all through the
// transaction. Anything else that names no table (nextval, txid_current,
// a user's function, a catalog read) runs on the authoritative shard,
// where unsharded data, sequences' values and temporary objects live.
func (c *clientConn) fixedShard(st *plannedStmt) []string {
	if c.tx.active && len(c.tx.shards) > 0 && anywhere(st) {
		return c.tx.shards[:1]
	}
	return st.Targets
}

// anywhere reports a statement any shard answers alike: it names no table
// (not even a catalog), calls only functions known to change nothing and
// leaves nothing in the session.
func anywhere(st *plannedStmt) bool {
	return len(st.Tables) == 0 && st.SessionState == 0 && !st.SideEffects &&
		(st.Kind == planner.Select && st.ReadOnly || st.Kind == planner.Show)
}

// txOrAuthoritative is where statements the router coordinates go when
// they need a shard at all (SET, FETCH, DISCARD, transaction control in
// the extended protocol, a syntax error for Postgres to report): the open
// transaction's first shard, so that they act in the transaction, else
// targets.
func (c *clientConn) txOrAuthoritative(targets []string) []string {
	if c.tx.active && len(c.tx.shards) > 0 {
		return c.tx.shards[:1]
	}
	return targets
}

// onlyShard returns the topology's shard when it has exactly one.
func (c *clientConn) onlyShard() string { return c.srv.onlyShard() }

func (c *clientConn) authoritativeRoute() routed {
	shard, _ := c.authoritativeShard()
	return routed{mode: routeOne, shards: c.txOrAuthoritative([]string{shard})}
}

// sameShard reports whether every statement of a multi-statement string
// runs on the same single shard and none needs the router, so the string
// can go as it came, and Postgres gives it its implicit-transaction
// semantics. Outside a transaction, BEGIN, COMMIT and ROLLBACK go with
// the string, and so do SAVEPOINT, RELEASE, ROLLBACK TO and SET
// TRANSACTION in a string without BEGIN (in the string's implicit
// transaction, which Postgres alone keeps), and statements that cannot
// run in a transaction block, which Postgres refuses there wherever they
// go ("VACUUM cannot run inside a transaction block").
func (c *clientConn) sameShard(stmts []*plannedStmt) bool {
	var shard string
	begins, inString := false, false
	for _, st := range stmts {
		if st.Kind == planner.Transaction && st.Transaction == planner.Begin {
			begins = true
		}
	}
	for _, st := range stmts {
		switch {
		case st.Err != nil:
			return false
		case st.NoTransaction:
			inString = true
			continue
		case st.Kind == planner.Transaction && !c.tx.active:
			switch st.Transaction {
			case planner.Begin, planner.Commit, planner.Rollback:
				continue
			case planner.Savepoint, planner.Release, planner.RollbackTo, planner.SetTransaction:
				if begins {
					return false
				}
				inString = true
				continue
			}
			return false
		case st.Route == planner.Router || st.Route == planner.Shard || st.Route == planner.Gathered || st.Route == planner.Everywhere || len(st.Targets) != 1:
			return false
		case st.SessionState != 0:
			return false
		}
		// Where route sends the statement alone, so that the string
		// goes where each of its statements would.
		target := c.fixedShard(st)[0]
		if shard == "" {
			shard = target
		} else if shard != target {
			return false
		}
	}
	return shard != "" || inString
}

// combined is the route of a multi-statement string sent whole: that of
// its first statement that runs on a shard of its own (sameShard), else
// the authoritative one. Its SET statements are recorded once the string
// ran without error.
func (c *clientConn) combined(stmts []*plannedStmt, sql string) routed {
	r := c.authoritativeRoute()
	for _, st := range stmts {
		if st.Route != planner.Router && !st.NoTransaction {
			r = c.route(st, nil)
			break
		}
	}
	r.kind, r.sql = kindRegular, sql
	r.sets, r.autocommit = nil, false
	r.deallocates, r.deallocName = false, ""
	for _, st := range stmts {
		if st.Deallocates && st.Name == "" {
			r.deallocates = true
		}
		if st.Kind == planner.Set {
			sr := c.route(st, nil)
			if sr.kind == kindSet || sr.kind == kindTesseraSet {
				r.sets = append(r.sets, &sr)
			}
		}
		r.readOnly = r.readOnly && st.ReadOnly
		if st.Kind == planner.DDL || st.Kind == planner.Utility {
			r.ddl = true
			r.roles = r.roles || changesLogins(st.SQL)
		}
	}
	return r
}

// changesLogins reports whether DDL may change who can log in where:
// roles, passwords, or databases (the role cache knows which databases
// exist). It may say yes too often, which costs one refresh of the cache,
// never too rarely: a database created through this router must take
// logins at once, though unknown names refresh the cache at most once a
// second (roles.go).
func changesLogins(sql string) bool {
	u := strings.ToUpper(sql)
	return strings.Contains(u, "ROLE") || strings.Contains(u, "USER") || strings.Contains(u, "PASSWORD") ||
		strings.Contains(u, "DATABASE")
}

// limitValue is the n of a LIMIT applied across shards: written in the
// statement, or a Bind parameter (text, or binary int8/int4/int2). A NULL,
// unreadable or negative one means no cap: the shards apply the LIMIT
// themselves, and refuse a negative one as Postgres does.
func limitValue(l planner.Limit, params *bindParams) int64 {
	if l.Param == 0 {
		return l.Value
	}
	if params == nil {
		return -1
	}
	format, v, ok := params.param(l.Param)
	if !ok || v == nil {
		return -1
	}
	var n int64
	switch f := int16(format); {
	case f == 1 && len(v) == 8:
		n = int64(binary.BigEndian.Uint64(v))
	case f == 1 && len(v) == 4:
		n = int64(int32(binary.BigEndian.Uint32(v)))
	case f == 1 && len(v) == 2:
		n = int64(int16(binary.BigEndian.Uint16(v)))
	case f == 0:
		parsed, err := strconv.ParseInt(strings.TrimSpace(string(v)), 10, 64)
		if err != nil {
			return -1
		}
		n = parsed
	default:
		return -1
	}
	if n < 0 {
		return -1
	}
	return n
}
