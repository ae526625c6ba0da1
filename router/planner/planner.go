package planner

import (
	"encoding/binary"
	"strings"
	"sync"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// Schema answers what the planner needs of the catalog.
type Schema interface {
	// ColumnType returns the type of a table's column (the planner asks
	// only for shard-key columns), or an error with SQLSTATE 42703 or
	// 42P01 if the column or table is unknown.
	ColumnType(db, schema, table, column string) (shardfunc.ColumnType, error)
	// ColumnNames returns a table's columns in their order (what an
	// INSERT without a column list fills), or an error with SQLSTATE
	// 42P01 if the table is unknown.
	ColumnNames(db, schema, table string) ([]string, error)
	// Routines returns a snapshot of the database's aggregate and window
	// functions. The planner asks for it only on a cache miss of a read
	// of sharded tables that calls functions.
	Routines(db string) (*Routines, error)
	// Views returns a snapshot of the database's views and the tables
	// they read. The planner asks for it once per cache miss of a
	// statement naming a relation.
	Views(db string) (*Views, error)
	// UniqueIndexes returns a table's unique indexes and exclusion
	// constraints (arbiter.go). The planner asks only for an INSERT ...
	// ON CONFLICT into a sharded table without a list of columns.
	UniqueIndexes(db, schema, table string) ([]UniqueIndex, error)
	// Functions returns a snapshot of the database's SQL and PL/pgSQL
	// functions and what their bodies read (functions.go). The planner
	// asks for it on a cache miss of a statement calling a function it
	// does not know.
	Functions(db string) (*Functions, error)
}

// Input is one query string to plan and the session state that shapes its
// plan.
type Input struct {
	// SQL is a simple-protocol Query (which may hold several statements)
	// or the query of a Parse (one statement). Cached plans keep it.
	SQL string
	// Database is the session's database.
	Database string
	// SearchPath is the session's search_path, resolved ("$user"
	// expanded); empty means public. It resolves unqualified table names:
	// the first schema in which the topology lists the table wins, else
	// the first schema of the path. The router cannot see which schema
	// really holds an unlisted table, so an unlisted table resolves by
	// that schema's (and database's) defaults.
	SearchPath []string
	// ParamOIDs are the parameter types of a Parse, 0 for unspecified; it
	// may be shorter than the number of parameters.
	ParamOIDs []uint32
	// UncommittedDDL: the session's transaction ran DDL, which a catalog
	// snapshot taken outside it cannot see (a CREATE AGGREGATE): every
	// call of a function not known to be plain is taken for an aggregate.
	UncommittedDDL bool
	// ReplicaReads: the topology given is a replica session's view
	// (topo.Topology.ReplicaReads), which differs from the primary one
	// under the same revision; its plans are cached apart.
	ReplicaReads bool
	// NoGather: the session turned gathering off (tessera.gather =
	// off): what the shards cannot answer alone is refused (gather.go).
	NoGather bool
}

// Planner turns SQL text into routing plans and caches them. It is safe
// for concurrent use by many sessions.
type Planner struct {
	cache *cache // nil: no caching
}

// New returns a planner whose cache holds about capacity inputs' plans; 0
// disables caching.
func New(capacity int) *Planner {
	p := &Planner{}
	if capacity > 0 {
		p.cache = newCache(capacity)
	}
	return p
}

var scans = sync.Pool{New: func() any { return new(scan) }}

// Plan returns the plans of every statement of in.SQL, in order: a
// simple-protocol Query may hold several, a Parse holds one; a string with
// none gives one Empty statement. A statement the router cannot run
// carries its error in Err; Plan itself fails only on input Postgres
// would refuse as a whole (a syntax error, SQLSTATE 42601, as a
// *SyntaxError).
//
// top and revision are the topology snapshot to plan against: a plan is
// reused only under the revision it was made for, and the first Plan with
// a newer revision drops every cached plan. schema is asked for shard-key
// column types on a cache miss; call Invalidate after a schema change.
//
// A cache hit costs a scan of the text and a map lookup. The statements
// returned are shared with the cache when in.SQL is the text that was
// planned; otherwise they are copies bound to in.SQL (their SQL and Keys
// are this input's).
func (p *Planner) Plan(top *topo.Topology, revision int64, schema Schema, in Input) ([]*Statement, error) {
	if top == nil || schema == nil {
		return nil, pgerr.New(pgerr.InternalError, "planner: no topology or schema")
	}
	if strings.IndexByte(in.SQL, 0) >= 0 {
		return nil, pgerr.New(pgerr.ProtocolViolation, "query string contains a zero byte")
	}
	sc := scans.Get().(*scan)
	defer scans.Put(sc)
	sc.run(in.SQL)
	if p.cache == nil {
		stmts, _, _, err := p.miss(top, schema, in, sc)
		return stmts, err
	}
	p.cache.observe(revision)
	var missed *cacheShard
	if !sc.odd {
		e, sh := p.cache.get(sc.cacheKey(false, revision, &in))
		if e != nil {
			sh.hits.Add(1)
			return e.bind(in.SQL, sc), nil
		}
		missed = sh
	}
	e, sh := p.cache.get(sc.cacheKey(true, revision, &in))
	if e != nil {
		sh.hits.Add(1)
		return e.stmts, nil
	}
	if missed == nil {
		missed = sh
	}
	missed.misses.Add(1)
	stmts, shape, cacheable, err := p.miss(top, schema, in, sc)
	if err != nil || !cacheable {
		return stmts, err
	}
	p.cache.put(sc.cacheKey(!shape, revision, &in), &entry{text: in.SQL, stmts: stmts})
	return stmts, nil
}

// miss parses and plans; it takes in by value so that only a miss moves
// it to the heap.
func (p *Planner) miss(top *topo.Topology, schema Schema, in Input, sc *scan) ([]*Statement, bool, bool, error) {
	return parse(top, schema, &in, sc)
}

// Invalidate drops every cached plan. Call it after a schema change: plans
// hold the shard-key column types the Schema gave.
func (p *Planner) Invalidate() {
	if p.cache != nil {
		p.cache.clear()
	}
}

// Stats counts the cache's work since New.
type Stats struct {
	Hits, Misses uint64 // Plan calls answered from the cache, and not
	Entries      int    // inputs whose plans are cached now
}

// Stats returns the cache's counters.
func (p *Planner) Stats() Stats {
	if p.cache == nil {
		return Stats{}
	}
	return p.cache.stats()
}

// cacheKey builds the cache key of the scanned input into sc.key: the
// topology revision, the session state that shapes plans (database, search
// path, parameter types), then the shape, or for an exact key the text.
func (sc *scan) cacheKey(exact bool, rev int64, in *Input) []byte {
	k := append(sc.key[:0], 'S')
	if exact {
		k[0] = 'X'
	}
	// One byte of flags, so that no flag can be read as the revision's.
	var flags byte
	if in.UncommittedDDL {
		flags |= 1
	}
	if in.ReplicaReads {
		flags |= 2
	}
	if in.NoGather {
		flags |= 4
	}
	k = append(k, flags)
	k = binary.LittleEndian.AppendUint64(k, uint64(rev))
	k = appendString(k, in.Database)
	k = binary.AppendUvarint(k, uint64(len(in.SearchPath)))
	for _, s := range in.SearchPath {
		k = appendString(k, s)
	}
	k = binary.AppendUvarint(k, uint64(len(in.ParamOIDs)))
	for _, o := range in.ParamOIDs {
		k = binary.LittleEndian.AppendUint32(k, o)
	}
	if exact {
		k = append(k, in.SQL...)
	} else {
		k = append(k, sc.shape...)
	}
	sc.key = k
	return k
}

func appendString(b []byte, s string) []byte {
	return append(binary.AppendUvarint(b, uint64(len(s))), s...)
}

// bind returns the entry's statements for sql, an input of the same shape:
// the cached statements themselves for the same text, else copies whose
// SQL and Keys are sql's.
func (e *entry) bind(sql string, sc *scan) []*Statement {
	if sql == e.text || e.stmts[0].Kind == Empty {
		return e.stmts
	}
	if len(e.stmts) == 1 {
		// One allocation for the common case.
		b := &bound{st: *e.stmts[0]}
		b.st.rebind(sql, sc, b.keys[:0], b.lits[:0])
		b.list[0] = &b.st
		return b.list[:]
	}
	out := make([]*Statement, len(e.stmts))
	copies := make([]Statement, len(e.stmts))
	for i, t := range e.stmts {
		copies[i] = *t
		copies[i].rebind(sql, sc, nil, nil)
		out[i] = &copies[i]
	}
	return out
}

// bound is a single statement bound to a new text, with room for its keys.
type bound struct {
	st   Statement
	list [1]*Statement
	keys [1]Key
	lits [4]span
}

// rebind points st's SQL, literal keys and (for an auto-prepared
// statement) literal tokens at sql, using the storage of keys and lits.
func (st *Statement) rebind(sql string, sc *scan, keys []Key, lits []span) {
	start, end := 0, len(sql)
	if st.semiFrom >= 0 {
		start = sc.semis[st.semiFrom] + 1
	}
	if st.semiTo >= 0 {
		end = sc.semis[st.semiTo]
	}
	start, end = trimSpace(sql, start, end)
	st.SQL = sql[start:end]
	if st.Auto != nil {
		// Same shape, same literal tokens in the same order.
		for _, sp := range sc.lits {
			if sp.start >= start && sp.end <= end {
				lits = append(lits, span{start: sp.start - start, end: sp.end - start, class: sp.class})
			}
		}
		st.lits = lits
	}
	if len(st.Keys) == 0 {
		return
	}
	keys = append(keys, st.Keys...)
	for i := range keys {
		bindKey(&keys[i], sql, sc.lits, start)
	}
	st.Keys = keys
}
