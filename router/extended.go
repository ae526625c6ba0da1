package router

import (
	"context"
	"encoding/binary"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/router/planner"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// prepared is a statement the client prepared. Shards know it by a name
// derived from its text and parameter types, so any backend that serves
// the session can have it (the sidecar prepares it where missing).
type prepared struct {
	name string // the client's; "" for the unnamed statement
	sql  string
	oids []uint32
	stmt *plannedStmt
	// revision is the topology's that stmt was planned with, and
	// replica whether by its replica reads (clientConn.view).
	revision int64
	replica  bool
	// epoch is the schema epoch the client prepared it in: the shards'
	// statements made of it are named with it (shardName).
	epoch int64
	proto *pb.PreparedStatement // nil for the unnamed statement
	named *pb.PreparedStatement // the unnamed one's content name, made when needed
	// ownShards: the shards whose pinned backend has the statement under
	// the client's name (ownnames.go).
	ownShards []string
	// fill: the statement bound in this one's place when it is an INSERT
	// whose sequence values the router fills in (extendedFill): this
	// one's text with parameters for them after the client's. A fill's
	// fillSeqs are those parameters' sequences, and clientParams how
	// many parameters come before them.
	fill         *prepared
	fillSeqs     []sequenceRef
	clientParams int
}

// extBatch gathers extended-protocol messages up to Sync. Messages for one
// target go to it as one batch; when a statement needs another target
// (a pgx SendBatch inserting rows for several shards, say), the messages
// so far become a segment of their own and run first, each segment with
// its own Sync (so the batch is not one implicit transaction across
// shards, as it cannot be).
type extBatch struct {
	segments []segment
	frontend []byte
	prepared []*pb.PreparedStatement
	// group is where the current statement's messages start in frontend
	// (its unnamed Parse, or its Bind); -1 before one starts.
	group   int
	r       *routed // where the batch runs
	backend bool    // holds messages for a shard
	skip    bool    // an error: discard messages until Sync
	sets    []*routed
	notes   []*routed // what the session records once the batch ran (noteSuccess)
	// shows are the tessera.* settings the batch SHOWs: a shard answers
	// them, so the batch carries their values (settings.withShown).
	shows []string
	// unnamedHere: the unnamed statement was parsed in this batch, so
	// the backend that runs its Bind has it.
	unnamedHere bool
	// notReads: a Bind in the batch binds something other than a plain
	// read, so the batch may not be pipelined whatever its target says.
	notReads bool
	// binds counts the batch's Binds; the first one's statement and
	// where its parameters sit in frontend let the batch be routed again
	// when it holds that one statement (replannable).
	binds       int
	first       *prepared
	firstParams [2]int
	replannable bool
}

// segment is a finished part of a batch, bound for one target. after
// holds answers the router makes itself (ParseComplete for a named Parse)
// that belong right after the segment's own answer.
type segment struct {
	r        *routed
	frontend []byte
	prepared []*pb.PreparedStatement
	after    []byte
}

func (b *extBatch) reset() {
	b.segments = b.segments[:0]
	b.group = -1
	b.frontend = b.frontend[:0]
	b.prepared = b.prepared[:0]
	b.r, b.backend, b.skip, b.sets, b.notes, b.shows = nil, false, false, nil, nil, nil
	b.unnamedHere, b.notReads = false, false
	b.binds, b.first, b.replannable = 0, nil, false
}

// noteShow marks the batch as showing p's tessera.* setting when p is
// such a SHOW: the shard that parses, describes or runs it answers from
// its session (Postgres refuses to describe a setting it does not know),
// so the batch carries the setting (settings.withShown).
func (c *clientConn) noteShow(p *prepared) {
	st := p.stmt
	if st == nil || st.Kind != planner.Show || !strings.HasPrefix(strings.ToLower(st.Name), "tessera.") {
		return
	}
	if _, err := c.settings.showTessera(st.Name); err == nil {
		c.batch.shows = append(c.batch.shows, st.Name)
	}
}

// extended handles Parse, Bind, Describe, Execute, Close and Flush.
func (c *clientConn) extended(typ byte, msg []byte) error {
	if c.batch.skip {
		return nil
	}
	var err error
	switch typ {
	case 'P':
		err = c.parse(msg)
	case 'B':
		err = c.bind(msg)
	case 'D':
		err = c.describe(msg)
	case 'E':
		err = c.executeMsg(msg)
	case 'C':
		err = c.closeMsg(msg)
	case 'H':
		return c.flushBatch()
	}
	if err == nil && len(c.batch.frontend) > c.srv.cfg.MaxMessageSize {
		// Messages wait here until Sync: bound what one client can pile up.
		err = pgerr.New("54000", "more than %d bytes of messages without Sync", c.srv.cfg.MaxMessageSize)
	}
	if err != nil {
		if pgerr.Code(err) == pgerr.ProtocolViolation {
			return err
		}
		c.batchError(err)
	}
	return nil
}

// batchError reports an error the router found in the batch and, as
// Postgres does, discards the rest of the batch until Sync.
func (c *clientConn) batchError(err error) {
	if c.batch.backend || len(c.batch.segments) > 0 {
		// Messages before the error still run, in order, before it.
		c.runBatch(false)
	}
	c.out = appendError(c.out, "ERROR", err)
	c.failTx()
	c.batch.reset()
	c.batch.skip = true
}

func (c *clientConn) parse(msg []byte) error {
	name, off, err := cstring(msg, 5)
	if err != nil {
		return err
	}
	sql, off, err := cstring(msg, off)
	if err != nil {
		return err
	}
	if off+2 > len(msg) {
		return pgerr.New(pgerr.ProtocolViolation, "invalid Parse message")
	}
	n := int(binary.BigEndian.Uint16(msg[off:]))
	off += 2
	if off+4*n > len(msg) {
		return pgerr.New(pgerr.ProtocolViolation, "invalid Parse message")
	}
	oids := make([]uint32, n)
	for i := range oids {
		oids[i] = binary.BigEndian.Uint32(msg[off+4*i:])
	}
	stmts, revision, replica, err := c.planView(sql, oids)
	if pgerr.Code(err) == "42601" {
		// Postgres reports the syntax error itself, in its place in the
		// batch, with its position.
		if c.batch.r == nil {
			r := c.authoritativeRoute()
			c.batch.r = &r
		}
		c.batch.frontend = append(c.batch.frontend, msg...)
		c.batch.backend = true
		return nil
	}
	if err != nil {
		return err
	}
	if len(stmts) > 1 {
		return pgerr.New("42601", "cannot insert multiple commands into a prepared statement")
	}
	p := &prepared{sql: sql, oids: oids, revision: revision, replica: replica, epoch: c.srv.schemaEpoch.Load()}
	if len(stmts) == 1 {
		p.stmt = stmts[0]
		if p.fill, err = c.extendedFill(context.Background(), p); err != nil {
			return err
		}
		c.noteShow(p)
	}
	if name == "" {
		c.unnamed = p
		c.batch.unnamedHere = true
		c.batch.group = len(c.batch.frontend)
		c.batch.frontend = append(c.batch.frontend, msg...)
		c.batch.backend = true
		return nil
	}
	if c.stmts[name] != nil {
		return pgerr.New("42P05", "prepared statement %q already exists", name)
	}
	p.name = name
	p.proto = &pb.PreparedStatement{Name: p.shardName(sql), Query: sql, ParamOids: oids}
	c.stmts[name] = p
	// The router answers a named Parse itself. After messages bound for a
	// shard, its answer must follow theirs: they become a segment and the
	// ParseComplete goes after it.
	b := &c.batch
	if len(b.frontend) > 0 {
		b.closeSegment()
	}
	if n := len(b.segments); n > 0 {
		b.segments[n-1].after = appendMsg(b.segments[n-1].after, '1')
	} else {
		c.out = appendMsg(c.out, '1')
	}
	return nil
}

// closeSegment makes the messages gathered so far a segment of their own.
func (b *extBatch) closeSegment() {
	b.segments = append(b.segments, segment{
		r:        b.r,
		frontend: append([]byte(nil), b.frontend...),
		prepared: append([]*pb.PreparedStatement(nil), b.prepared...),
	})
	b.frontend = b.frontend[:0]
	b.prepared = b.prepared[:0]
	b.group, b.r, b.backend = -1, nil, false
}

// lookup finds a prepared statement by the name a message carries (the
// name is not copied: Bind asks for every execution).
func (c *clientConn) lookup(name []byte) (*prepared, error) {
	if len(name) == 0 {
		if c.unnamed == nil {
			return nil, pgerr.New("26000", "unnamed prepared statement does not exist")
		}
		return c.unnamed, nil
	}
	p := c.stmts[string(name)]
	if p == nil {
		return nil, pgerr.New("26000", "prepared statement %q does not exist", name)
	}
	return p, nil
}

// use adds a statement, by content name, to the batch's list of
// statements the shard must have.
func (c *clientConn) use(proto *pb.PreparedStatement) {
	if proto == nil {
		return
	}
	for _, x := range c.batch.prepared {
		if x == proto {
			return
		}
	}
	c.batch.prepared = append(c.batch.prepared, proto)
}

// shardName names a statement made of p (p's own, or one the router
// rewrote it into) on the shards, with p's parameter types and epoch.
func (p *prepared) shardName(sql string) string {
	return planner.StatementNameAt(sql, p.oids, p.epoch)
}

// contentProto returns the statement under its content name, for an
// unnamed statement bound in a later batch than its Parse.
func (p *prepared) contentProto() *pb.PreparedStatement {
	if p.named == nil {
		p.named = &pb.PreparedStatement{Name: p.shardName(p.sql), Query: p.sql, ParamOids: p.oids}
	}
	return p.named
}

// target sets where the current statement runs. A statement for another
// target than the batch's so far closes a segment: the messages before
// the statement's own run first, where they were bound. Transaction
// control runs as a segment of its own, placed when it runs (runSegment):
// where it must go depends on the shards the statements before it reach.
func (c *clientConn) target(r *routed) error {
	if r.err != nil {
		return r.err
	}
	b := &c.batch
	if b.r == nil {
		b.r = r
		return nil
	}
	if !r.txControl && !b.r.txControl && sameTargets(b.r, r) {
		return nil
	}
	start := b.group
	if start < 0 {
		start = len(b.frontend)
	}
	if start > 0 {
		rest := append([]byte(nil), b.frontend[start:]...)
		b.frontend = b.frontend[:start]
		b.closeSegment()
		b.frontend = append(b.frontend, rest...)
		b.group, b.backend = 0, len(rest) > 0
	}
	b.r = r
	return nil
}

func sameTargets(a, b *routed) bool {
	if a.mode != b.mode || len(a.shards) != len(b.shards) || a.mode == routeSplit || a.mode == routeKeyMove || a.mode == routeInsertSelect || (a.mode == routeScatter && (a.limited || b.limited || a.engine != nil || b.engine != nil)) {
		return false
	}
	for i := range a.shards {
		if a.shards[i] != b.shards[i] {
			return false
		}
	}
	return true
}

func (c *clientConn) bind(msg []byte) error {
	portal, off, err := cstring(msg, 5)
	if err != nil {
		return err
	}
	name, rest, err := cbytes(msg, off)
	if err != nil {
		return err
	}
	p, err := c.lookup(name)
	if err != nil {
		return err
	}
	c.stat.bound(p)
	if p.fill != nil {
		// Bound as its filled form, with the sequence values added.
		if msg, err = c.fillBind(context.Background(), p.fill, string(name), portal, msg[rest:]); err != nil {
			return err
		}
		p = p.fill
		rest = 5 + len(portal) + 1 + len(p.proto.Name) + 1
	}
	params := &c.bindParams
	if err := params.parse(msg[rest:]); err != nil {
		return err
	}
	if err := c.current(p); err != nil {
		return err
	}
	if c.srv.buffers.tablesHeld() && c.placesAnew() {
		// A cutover is moving tables: the statement waits here, before
		// it is routed, if it names one (the client's later messages
		// wait in the socket). The whole batch waits with it, in order.
		var hold tableHold
		waited, err := c.srv.buffers.holdForTables(context.Background(), []*plannedStmt{p.stmt}, &hold)
		if err != nil {
			return err
		}
		if waited {
			if err := c.current(p); err != nil {
				return err
			}
		}
	}
	r := c.bindTarget()
	*r = c.route(p.stmt, params)
	c.batch.binds++
	c.batch.notReads = c.batch.notReads || !r.autocommit
	if r.engine != nil && r.engine.ShardSQL != "" {
		r.shardStmt = &pb.PreparedStatement{Name: p.shardName(r.engine.ShardSQL), Query: r.engine.ShardSQL, ParamOids: p.oids}
	}
	if r.gather != nil {
		r.shardStmt = &pb.PreparedStatement{Name: p.shardName(r.gather.SQL), Query: r.gather.SQL, ParamOids: p.oids}
	}
	if r.mode == routeSplit && r.err == nil {
		// Each shard gets its own Bind; the client's stays in the batch
		// to mark where they go.
		if err := r.split.makeBinds(portal, p, params); err != nil {
			c.batchError(err)
			return nil
		}
	}
	if r.err != nil && r.err == p.stmt.Err && c.takesInsertSelect(p.stmt) {
		// The planner's refusal is what the router answers by running
		// it (insertselect_ext.go).
		if err := r.bindInsertSelect(portal, p, params, c.authoritativeRoute().shards); err != nil {
			return err
		}
	}
	if r.mode == routeKeyMove && r.err == nil {
		// Its steps are bound with the client's parameters (keymove.go).
		if err := r.bindKeyMove(portal, p, params); err != nil {
			return err
		}
	}
	switch r.kind {
	case kindExplain:
		return pgerr.New(pgerr.FeatureNotSupported, "send EXPLAIN (TESSERA) with the simple query protocol")
	case kindOnlineDDL:
		return pgerr.New(pgerr.FeatureNotSupported, "send a schema change under tessera.ddl_strategy %q with the simple query protocol", c.settings.ddlStrategy)
	case kindTesseraSet:
		if _, err := (&sessionSettings{}).validateTessera(r.setName, r.setValue); err != nil {
			return err
		}
		c.batch.sets = append(c.batch.sets, r)
	case kindSet:
		c.batch.sets = append(c.batch.sets, r)
	case kindTesseraShow:
		c.noteShow(p)
	}
	if r.relations != nil || r.declares != "" || r.deallocates {
		c.batch.notes = append(c.batch.notes, r)
	}
	switch r.kind {
	case kindCommit, kindRollback, kindTxOther:
		r.txControl = true
	}
	if r.kind == kindSet && (r.setLocal || c.tx.active) {
		r.txControl = true
	}
	if c.batch.group < 0 {
		c.batch.group = len(c.batch.frontend)
	}
	if err := c.target(r); err != nil {
		return err
	}
	if r.mode == routeOne && len(r.shards) == 1 {
		c.portals[portal] = r.shards[0]
	}
	proto := p.proto
	if proto == nil && !c.batch.unnamedHere {
		// The unnamed statement was parsed in an earlier batch (pgx's
		// describe-exec mode parses and describes first), perhaps on
		// another shard: the Bind's backend may not have it, or may hold
		// another session's. It runs by content name instead, which the
		// sidecar prepares where missing.
		proto = p.contentProto()
	}
	if proto != nil {
		// Rewrite the statement name; the parameter frames stay as sent.
		shardName, own := c.shardName(p, r, proto)
		start := len(c.batch.frontend)
		c.batch.frontend = append(c.batch.frontend, 'B', 0, 0, 0, 0)
		c.batch.frontend = append(c.batch.frontend, portal...)
		c.batch.frontend = append(c.batch.frontend, 0)
		c.batch.frontend = append(c.batch.frontend, shardName...)
		c.batch.frontend = append(c.batch.frontend, 0)
		paramsAt := len(c.batch.frontend)
		c.batch.frontend = append(c.batch.frontend, msg[rest:]...)
		binary.BigEndian.PutUint32(c.batch.frontend[start+1:], uint32(len(c.batch.frontend)-start-1))
		if !own {
			c.use(proto)
		}
		// Under a shard's own name (a pinned session's), the Bind fits
		// that shard only.
		c.batch.noteFirst(p, r, paramsAt, len(c.batch.frontend), !own)
	} else {
		c.batch.frontend = append(c.batch.frontend, msg...)
		c.batch.noteFirst(p, r, len(c.batch.frontend)-len(msg)+rest, len(c.batch.frontend), true)
	}
	c.batch.backend = true
	return nil
}

// current plans p again when the topology changed since it was planned
// (a prepared statement outlives topologies, and a cutover moves tables),
// or when the session's target moved it to or from the replica reads'
// view.
func (c *clientConn) current(p *prepared) error {
	snap := c.srv.topo.Current()
	if p.stmt == nil || snap == nil {
		return nil
	}
	if _, replica := c.view(snap.Topology); snap.Revision == p.revision && replica == p.replica {
		return nil
	}
	stmts, revision, replica, err := c.planView(p.sql, p.oids)
	if err != nil {
		return err
	}
	if len(stmts) == 1 {
		p.stmt, p.revision, p.replica = stmts[0], revision, replica
	}
	return nil
}

// noteFirst remembers the batch's first Bind: its statement, and where
// its parameters are in frontend. Only a batch of that one statement,
// for one shard, under a name every shard knows, may be routed again.
func (b *extBatch) noteFirst(p *prepared, r *routed, paramsAt, paramsEnd int, anyShard bool) {
	if b.binds != 1 {
		b.replannable = false
		return
	}
	b.first, b.firstParams = p, [2]int{paramsAt, paramsEnd}
	b.replannable = anyShard && r.mode == routeOne && r.kind == kindRegular && len(b.segments) == 0
}

// bindTarget is where a Bind's route goes: the connection's own slot for
// the first of a batch (most batches have one Bind), else a new one, as
// the batch's target, its closed segments and its SETs keep theirs until
// the batch has run.
func (c *clientConn) bindTarget() *routed {
	b := &c.batch
	if b.r == nil && len(b.segments) == 0 && len(b.sets) == 0 && len(b.notes) == 0 {
		return &c.bindRouted
	}
	return new(routed)
}

// executeMsg queues an Execute; a portal bound in an earlier batch (inside
// a transaction) runs where it was bound.
func (c *clientConn) executeMsg(msg []byte) error {
	if c.batch.r == nil {
		portal, _, err := cstring(msg, 5)
		if err != nil {
			return err
		}
		shard, ok := c.portals[portal]
		if !ok {
			return pgerr.New("34000", "portal %q does not exist", portal)
		}
		c.batch.r = &routed{mode: routeOne, shards: []string{shard}}
	}
	c.batch.frontend = append(c.batch.frontend, msg...)
	c.batch.backend = true
	c.batch.group = -1 // the next statement starts after this Execute
	if m := c.batch.r.mode; m == routeSplit || m == routeKeyMove || m == routeInsertSelect {
		// A split INSERT (a key move, an INSERT ... SELECT the router
		// runs) runs as a segment of its own, up to its Execute.
		c.batch.closeSegment()
	}
	return nil
}

func (c *clientConn) describe(msg []byte) error {
	if len(msg) < 7 {
		return pgerr.New(pgerr.ProtocolViolation, "invalid Describe message")
	}
	name, _, err := cbytes(msg, 6)
	if err != nil {
		return err
	}
	if msg[5] == 'S' {
		p, err := c.lookup(name)
		if err != nil {
			return err
		}
		c.noteShow(p)
		if c.batch.r == nil {
			r := c.route(p.stmt, nil)
			if r.err != nil || len(r.shards) == 0 || r.mode != routeOne {
				// Describing needs any shard with the schema.
				r = c.authoritativeRoute()
			}
			c.batch.r = &r
		}
		proto := p.proto
		if proto == nil && !c.batch.unnamedHere {
			proto = p.contentProto() // as in bind
		}
		if proto != nil {
			shardName, own := c.shardName(p, c.batch.r, proto)
			c.batch.frontend = appendMsg(c.batch.frontend, 'D', []byte{'S'}, cstr(shardName))
			if !own {
				c.use(proto)
			}
			c.batch.backend = true
			return nil
		}
	}
	c.batch.frontend = append(c.batch.frontend, msg...)
	c.batch.backend = true
	return nil
}

func (c *clientConn) closeMsg(msg []byte) error {
	if len(msg) < 7 {
		return pgerr.New(pgerr.ProtocolViolation, "invalid Close message")
	}
	name, _, err := cstring(msg, 6)
	if err != nil {
		return err
	}
	if c.batch.r == nil {
		r := c.authoritativeRoute()
		c.batch.r = &r
	}
	if msg[5] == 'S' && name != "" {
		// The shards keep the statement (others may share it); closing a
		// name no backend has gives CloseComplete in its place.
		if p := c.stmts[name]; p != nil {
			c.forgetOwn(p)
			delete(c.stmts, name)
		}
		c.batch.frontend = appendMsg(c.batch.frontend, 'C', []byte{'S'}, cstr("tessera_closed"))
	} else {
		if msg[5] == 'S' {
			c.unnamed = nil
		}
		c.batch.frontend = append(c.batch.frontend, msg...)
	}
	c.batch.backend = true
	return nil
}

// unlessReads returns r, not to be pipelined if a Bind of the batch binds
// something other than a plain read (the batch's target is its first).
func (b *extBatch) unlessReads(r *routed) *routed {
	if !r.autocommit || !b.notReads {
		return r
	}
	rr := *r
	rr.autocommit = false
	return &rr
}

// sync ends the batch: it runs, and ReadyForQuery follows.
func (c *clientConn) sync() error {
	if !c.batch.skip && (c.batch.backend || len(c.batch.segments) > 0) {
		if err := c.runBatch(true); err != nil {
			return err
		}
	}
	c.batch.reset()
	if c.copyIn == nil {
		c.out = appendReady(c.out, c.status())
	}
	return nil
}

// flushBatch answers Flush: what is gathered runs now (with a Sync the
// client did not send; its ReadyForQuery is dropped).
func (c *clientConn) flushBatch() error {
	if c.batch.backend || len(c.batch.segments) > 0 {
		if err := c.runBatch(false); err != nil {
			return err
		}
		skip := c.batch.skip
		c.batch.reset()
		c.batch.skip = skip
	}
	return c.flush()
}

// runBatch sends the gathered messages with a Sync.
func (c *clientConn) runBatch(final bool) error {
	r := c.batch.r
	if r == nil {
		ar := c.authoritativeRoute()
		r = &ar
	}
	r = c.batch.unlessReads(r)
	for _, seg := range c.batch.segments {
		sr := seg.r
		if sr == nil {
			ar := c.authoritativeRoute()
			sr = &ar
		}
		sr = c.batch.unlessReads(sr)
		failed, err := c.runSegment(sr, append(seg.frontend, 'S', 0, 0, 0, 4), seg.prepared, len(c.batch.sets) > 0)
		if err != nil {
			return err
		}
		if failed {
			// Postgres skips the rest of a batch after an error.
			c.batch.skip = !final
			return nil
		}
		c.out = append(c.out, seg.after...)
	}
	if len(c.batch.frontend) == 0 {
		return nil
	}
	frontend := append(c.batch.frontend, 'S', 0, 0, 0, 4)
	b := &c.batch
	r.replannable = b.replannable && b.binds == 1 && len(b.segments) == 0 && !c.tx.active
	failed, err := c.runSegment(r, frontend, b.prepared, len(b.sets) > 0)
	if err == errCutoverFenced {
		failed, err = c.rerouteFenced(frontend)
	}
	if err != nil {
		return err
	}
	if c.copyIn != nil {
		c.copyExtended = true
	}
	if failed {
		c.batch.skip = !final
		return nil
	}
	for _, s := range c.batch.sets {
		c.recordSetting(s)
	}
	for _, n := range c.batch.notes {
		c.noteSuccess(n)
	}
	return nil
}

// rerouteFenced runs again a batch of one statement that a cutover's
// fence refused, once the topology has moved its table (or a table
// buffer held it), routed anew with the parameters its Bind carries.
func (c *clientConn) rerouteFenced(frontend []byte) (bool, error) {
	ctx := context.Background()
	b := &c.batch
	p := b.first
	var hold tableHold
	for {
		err := c.srv.buffers.waitAfterFence(ctx, c.srv.topo, p.revision, []*plannedStmt{p.stmt}, &hold)
		if err == nil {
			err = c.current(p)
		}
		if err == nil {
			var waited bool
			if waited, err = c.srv.buffers.holdForTables(ctx, []*plannedStmt{p.stmt}, &hold); waited && err == nil {
				err = c.current(p)
			}
		}
		var r routed
		if err == nil {
			err = c.bindParams.parse(frontend[b.firstParams[0]:b.firstParams[1]])
		}
		if err == nil {
			r = c.route(p.stmt, &c.bindParams)
			err = r.err
		}
		if err != nil {
			c.out = appendError(c.out, "ERROR", err)
			return true, nil
		}
		r.replannable = r.mode == routeOne
		failed, err := c.runSegment(b.unlessReads(&r), frontend, b.prepared, len(b.sets) > 0)
		if err != errCutoverFenced {
			return failed, err
		}
	}
}

// runSegment runs one segment of a batch. Transaction control is placed
// now, with the transaction as the segments before it left it: COMMIT and
// ROLLBACK go to the transaction's first shard once every other shard has
// ended its part; SAVEPOINT, RELEASE, ROLLBACK TO and SET LOCAL go to
// every shard of the transaction, as in the simple protocol.
func (c *clientConn) runSegment(r *routed, frontend []byte, prepared []*pb.PreparedStatement, scan bool) (bool, error) {
	ctx := context.Background()
	if !r.txControl || !c.tx.active || len(c.tx.shards) == 0 {
		return c.execute(ctx, r, frontend, prepared, scan)
	}
	if r.kind != kindCommit && r.kind != kindRollback {
		return c.onTxShards(ctx, r, frontend, prepared)
	}
	if r.kind == kindCommit && c.needsAtomicCommit() {
		return c.commitAtomicExtended(ctx, r, frontend, prepared, scan)
	}
	if r.kind == kindCommit && c.tx.failed && (c.tx.routerFailed || len(c.tx.shards) > 1) {
		// The client's COMMIT must not commit the first shard's part if
		// the transaction failed elsewhere (or in the router): it fails
		// there too, so that the COMMIT rolls back, as Postgres answers.
		if err := c.failOn(c.tx.shards[0]); err != nil {
			c.out = appendError(c.out, "ERROR", shardError(c.tx.shards[0], err))
			return true, nil
		}
	}
	if len(c.tx.shards) > 1 {
		if err := c.endOthers(r.kind == kindCommit); err != nil {
			c.out = appendError(c.out, "ERROR", err)
			c.tx.failed = true
		}
	}
	rr := *r
	rr.mode, rr.shards = routeOne, c.tx.shards[:1]
	return c.execute(ctx, &rr, frontend, prepared, scan)
}

var errBadBind = pgerr.New(pgerr.ProtocolViolation, "invalid Bind message")

// bindParams is a Bind message's parameter section, read in place.
type bindParams struct {
	formats []byte // int16 format codes
	nfmt    int
	values  [][]byte // nil for NULL
	results []byte   // the result-column format codes, as sent
}

func parseBindParams(b []byte) (*bindParams, error) {
	p := &bindParams{}
	return p, p.parse(b)
}

// parse reads the section into p, reusing p's slice: a session parses
// every Bind into the same bindParams.
func (p *bindParams) parse(b []byte) error {
	bad := errBadBind
	if len(b) < 2 {
		return bad
	}
	p.nfmt = int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if len(b) < 2*p.nfmt+2 {
		return bad
	}
	p.formats, b = b[:2*p.nfmt], b[2*p.nfmt:]
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	p.values = p.values[:0]
	for i := 0; i < n; i++ {
		if len(b) < 4 {
			return bad
		}
		l := int(int32(binary.BigEndian.Uint32(b)))
		b = b[4:]
		if l < 0 {
			p.values = append(p.values, nil)
			continue
		}
		if l > len(b) {
			return bad
		}
		p.values = append(p.values, b[:l])
		b = b[l:]
	}
	p.results = b
	return nil
}

// param returns parameter n (1-based) with its format code; the value is
// nil for NULL.
func (p *bindParams) param(n int) (shardfunc.Format, []byte, bool) {
	if n < 1 || n > len(p.values) {
		return 0, nil, false
	}
	var f int16
	switch {
	case p.nfmt == 1:
		f = int16(binary.BigEndian.Uint16(p.formats))
	case p.nfmt > 1 && n <= p.nfmt:
		f = int16(binary.BigEndian.Uint16(p.formats[2*(n-1):]))
	}
	return shardfunc.Format(f), p.values[n-1], true
}

// planner gives the planner the parameters, or nil without a Bind.
func (p *bindParams) planner() planner.Params {
	if p == nil {
		return nil
	}
	return p.param
}
