package router

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
)

// Sequences that feed tables living beyond the authoritative shard
// (sharded and reference tables: a serial, bigserial or identity column,
// or a DEFAULT nextval('s')) are served from the authoritative shard's
// copy of the sequence, which is the one every other statement uses
// (sequence functions run there). Each router reserves a block of values
// at a time (Config.SequenceBlock, 1000 by default) with one statement
// that calls nextval that many times in its own transaction on the
// authoritative shard, and hands them out to its sessions: ids are unique
// across shards and routers, and an INSERT pays a round trip only when
// its router's block runs out.
//
// The values are values that sequence hands out (INCREMENT BY, MINVALUE,
// MAXVALUE and CYCLE apply as nextval applies them, and past the end
// nextval's own 2200H is the answer); nextval is never rolled back, so a
// router that stops, or drops its blocks, leaves a gap, never a value
// handed out twice. The reservation commits like any commit on that shard:
// under durability sync or stronger it is on the synchronous replica
// before the router uses a value, so a failover cannot hand them out
// again (under async, as any acknowledged commit, it may be lost).
//
// A router drops every block when the schema changes (its own DDL, and
// the announcements of others: ALTER SEQUENCE, RESTART, TRUNCATE ...
// RESTART IDENTITY), and a session's setval makes its router drop them at
// once and announce a schema change, so every router drops its blocks
// when it hears of it: a value of an older block may be handed out by
// another router until then, as Postgres's own CACHE lets a session use
// values it cached before a setval.

// DefaultSequenceBlock is Config.SequenceBlock's default.
const DefaultSequenceBlock = 1000

// maxSequenceBlock bounds Config.SequenceBlock: one reservation is one
// statement whose answer the router holds.
const maxSequenceBlock = 1_000_000

// sequenceRef names a sequence on the authoritative shard.
type sequenceRef struct {
	oid          uint32 // on the authoritative shard
	schema, name string
}

func (s sequenceRef) qualified() string {
	return quoteIdent(s.schema) + "." + quoteIdent(s.name)
}

// fedColumn is a column whose default is the next value of a sequence.
type fedColumn struct {
	column string
	seq    sequenceRef
	// always: GENERATED ALWAYS AS IDENTITY (a value the router fills in
	// needs OVERRIDING SYSTEM VALUE).
	always, identity bool
}

// sequenceCatalog is what the router knows of one database's sequences.
type sequenceCatalog struct {
	// fed lists each table's columns fed by a sequence, by "schema.table".
	fed map[string][]fedColumn
	// byName finds every sequence by "schema.name".
	byName map[string]sequenceRef
}

// sequenceBlock is the values a router holds of one sequence, in the
// order nextval gave them.
type sequenceBlock struct {
	mu     sync.Mutex
	values []int64
}

// sequences is a router's blocks and catalog.
type sequences struct {
	srv   *Server
	block int
	mu    sync.Mutex
	// generation counts drops: a reservation made across one is not kept.
	generation uint64
	blocks     map[string]*sequenceBlock   // by database and oid
	catalogs   map[string]*sequenceCatalog // by database
	allowed    map[string]bool             // by database, role and oid
}

func newSequences(srv *Server, block int) *sequences {
	return &sequences{srv: srv, block: block, blocks: map[string]*sequenceBlock{},
		catalogs: map[string]*sequenceCatalog{}, allowed: map[string]bool{}}
}

// drop forgets every block, catalog and privilege: the schema changed or a
// sequence was set.
func (q *sequences) drop() {
	q.mu.Lock()
	q.generation++
	q.blocks = map[string]*sequenceBlock{}
	q.catalogs = map[string]*sequenceCatalog{}
	q.allowed = map[string]bool{}
	q.mu.Unlock()
}

// catalog returns database db's sequences and the columns they feed.
func (q *sequences) catalog(ctx context.Context, db string) (*sequenceCatalog, error) {
	q.mu.Lock()
	cat, gen := q.catalogs[db], q.generation
	q.mu.Unlock()
	if cat != nil {
		return cat, nil
	}
	// A column is fed when its default is exactly nextval of a sequence
	// (serial, bigserial, DEFAULT nextval('s')), or it is an identity
	// column (its sequence depends on it internally).
	// The last column: 'n' for a nextval default, else attidentity.
	rows, err := q.srv.adminQuery(ctx, db, `SELECT n.nspname, c.relname, a.attname, s.oid::text, sn.nspname, s.relname, 'n'
		FROM pg_catalog.pg_attrdef ad
		JOIN pg_catalog.pg_attribute a ON a.attrelid = ad.adrelid AND a.attnum = ad.adnum AND NOT a.attisdropped
		JOIN pg_catalog.pg_class c ON c.oid = ad.adrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_attrdef'::regclass AND d.objid = ad.oid AND d.refclassid = 'pg_catalog.pg_class'::regclass
		JOIN pg_catalog.pg_class s ON s.oid = d.refobjid AND s.relkind = 'S' JOIN pg_catalog.pg_namespace sn ON sn.oid = s.relnamespace
		WHERE pg_catalog.pg_get_expr(ad.adbin, ad.adrelid) ~ '^nextval\(''[^'']*''::regclass\)$'
		UNION ALL
		SELECT n.nspname, c.relname, a.attname, s.oid::text, sn.nspname, s.relname, a.attidentity::text
		FROM pg_catalog.pg_attribute a
		JOIN pg_catalog.pg_class c ON c.oid = a.attrelid JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_class'::regclass AND d.refclassid = 'pg_catalog.pg_class'::regclass
			AND d.refobjid = a.attrelid AND d.refobjsubid = a.attnum AND d.deptype = 'i'
		JOIN pg_catalog.pg_class s ON s.oid = d.objid AND s.relkind = 'S' JOIN pg_catalog.pg_namespace sn ON sn.oid = s.relnamespace
		WHERE a.attidentity IN ('a', 'd') AND NOT a.attisdropped
		UNION ALL
		SELECT '', '', '', s.oid::text, n.nspname, s.relname, ''
		FROM pg_catalog.pg_class s JOIN pg_catalog.pg_namespace n ON n.oid = s.relnamespace
		WHERE s.relkind = 'S' AND n.nspname NOT LIKE 'pg\_temp%'`)
	if err != nil {
		return nil, err
	}
	cat = &sequenceCatalog{fed: map[string][]fedColumn{}, byName: map[string]sequenceRef{}}
	for _, r := range rows {
		oid, err := strconv.ParseUint(r[3], 10, 32)
		if err != nil {
			return nil, pgerr.New(pgerr.InternalError, "sequence oid %q: %v", r[3], err)
		}
		seq := sequenceRef{oid: uint32(oid), schema: r[4], name: r[5]}
		if r[1] == "" {
			cat.byName[seq.schema+"."+seq.name] = seq
			continue
		}
		key := r[0] + "." + r[1]
		cat.fed[key] = append(cat.fed[key], fedColumn{column: r[2], seq: seq, always: r[6] == "a", identity: r[6] != "n"})
	}
	q.mu.Lock()
	if q.generation == gen {
		q.catalogs[db] = cat
	}
	q.mu.Unlock()
	return cat, nil
}

// checkPrivilege refuses a role that may not call nextval on seq (USAGE
// or UPDATE, as nextval requires), as Postgres would.
func (q *sequences) checkPrivilege(ctx context.Context, db, role string, seq sequenceRef) error {
	key := db + "\x00" + role + "\x00" + strconv.FormatUint(uint64(seq.oid), 10)
	q.mu.Lock()
	ok, known := q.allowed[key]
	gen := q.generation
	q.mu.Unlock()
	if !known {
		rows, err := q.srv.adminQuery(ctx, db, fmt.Sprintf("SELECT pg_catalog.has_sequence_privilege(%s, %d, 'USAGE, UPDATE')::text",
			pgwire.QuoteLiteral(role), seq.oid))
		if err != nil {
			return err
		}
		ok = len(rows) == 1 && rows[0][0] == "true"
		q.mu.Lock()
		if q.generation == gen {
			q.allowed[key] = ok
		}
		q.mu.Unlock()
	}
	if !ok {
		return pgerr.New("42501", "permission denied for sequence %s", seq.name)
	}
	return nil
}

// next returns n values of seq for one statement, reserving blocks on
// the authoritative shard as needed.
func (q *sequences) next(ctx context.Context, db string, seq sequenceRef, n int) ([]int64, error) {
	key := db + "\x00" + strconv.FormatUint(uint64(seq.oid), 10)
	out := make([]int64, 0, n)
	for len(out) < n {
		q.mu.Lock()
		b := q.blocks[key]
		if b == nil {
			b = &sequenceBlock{}
			q.blocks[key] = b
		}
		gen := q.generation
		q.mu.Unlock()

		b.mu.Lock()
		if len(b.values) == 0 {
			values, err := q.reserve(ctx, db, seq, max(q.block, n-len(out)))
			if err != nil {
				b.mu.Unlock()
				return nil, err
			}
			q.mu.Lock()
			current := q.generation == gen
			q.mu.Unlock()
			if !current {
				// Dropped while reserving (a setval, say): these values
				// may precede the change. They are skipped.
				b.mu.Unlock()
				continue
			}
			b.values = values
		}
		take := min(n-len(out), len(b.values))
		out = append(out, b.values[:take]...)
		b.values = b.values[take:]
		b.mu.Unlock()
	}
	return out, nil
}

// reserve calls nextval up to n times in one statement, in its own
// transaction on the authoritative shard. A sequence without CYCLE is
// asked for no more values than it has left (read in the same statement),
// so that a block does not use up values one Postgres would still hand
// out; if another router took them meanwhile and the sequence runs out
// mid-block, the router asks again for one value, and nextval's 2200H is
// then the answer, as on one Postgres.
func (q *sequences) reserve(ctx context.Context, db string, seq sequenceRef, n int) ([]int64, error) {
	rows, err := q.srv.adminQuery(ctx, db, reserveSQL(seq, n))
	if pgerr.Code(err) == "2200H" && n > 1 {
		rows, err = q.srv.adminQuery(ctx, db, reserveSQL(seq, 1))
	}
	if err != nil {
		return nil, err
	}
	values := make([]int64, len(rows))
	for i, r := range rows {
		if values[i], err = strconv.ParseInt(r[0], 10, 64); err != nil {
			return nil, pgerr.New(pgerr.InternalError, "sequence value %q: %v", r[0], err)
		}
	}
	if len(values) == 0 {
		return nil, pgerr.New(pgerr.InternalError, "reserving values of sequence %s returned none", seq.name)
	}
	return values, nil
}

// reserveSQL is the statement that reserves up to n values of seq: as
// many nextval calls as the sequence has values left without cycling
// (at least one, so that an exhausted sequence raises its own error).
func reserveSQL(seq sequenceRef, n int) string {
	return fmt.Sprintf(`SELECT pg_catalog.nextval(%[1]d::oid::regclass) FROM pg_catalog.generate_series(1, (
	SELECT CASE WHEN s.seqcycle THEN %[2]d ELSE GREATEST(1, LEAST(%[2]d, CASE WHEN s.seqincrement > 0
		THEN floor((s.seqmax::numeric - v.next) / s.seqincrement) + 1
		ELSE floor((v.next - s.seqmin::numeric) / -s.seqincrement) + 1 END)) END::int
	FROM pg_catalog.pg_sequence s, LATERAL (SELECT CASE WHEN is_called THEN last_value::numeric + s.seqincrement
		ELSE last_value::numeric END AS next FROM %[3]s) v
	WHERE s.seqrelid = %[1]d))`, seq.oid, n, seq.qualified())
}

// quoteIdent quotes a name for SQL.
func quoteIdent(s string) string {
	return `"` + strings.ReplaceAll(s, `"`, `""`) + `"`
}

// sessionSequences is what currval and lastval answer for a session: the
// last value this session got of each sequence the router served.
type sessionSequences struct {
	last    map[uint32]int64
	lastSeq uint32 // of lastval; 0: none yet
	// shardCalls: since the router first served this session, a statement
	// that may have called a sequence function ran on the authoritative
	// shard, whose own currval and lastval the router cannot see.
	shardCalls bool
}

func (s *sessionSequences) got(seq sequenceRef, v int64) {
	if s.last == nil {
		s.last = map[uint32]int64{}
	}
	s.last[seq.oid] = v
	s.lastSeq = seq.oid
}

// nextSequenceValues returns n values of seq for this session, in order,
// after the privilege check nextval makes, and counts them for currval
// and lastval. It is the internal API for every statement that fills a
// column from a sequence (INSERT here, COPY FROM for rows without the
// column).
func (c *clientConn) nextSequenceValues(ctx context.Context, seq sequenceRef, n int) ([]int64, error) {
	if err := c.srv.sequences.checkPrivilege(ctx, c.database, c.effectiveRole(), seq); err != nil {
		return nil, err
	}
	values, err := c.srv.sequences.next(ctx, c.database, seq, n)
	if err != nil {
		return nil, err
	}
	if len(values) > 0 {
		c.seqs.got(seq, values[len(values)-1])
	}
	return values, nil
}

// effectiveRole is the role the session's privileges are checked as: its
// SET ROLE, else its login.
func (c *clientConn) effectiveRole() string {
	if v, ok := c.settings.get("role"); ok {
		v = strings.Trim(v, `'"`)
		if v != "" && !strings.EqualFold(v, "none") && !strings.EqualFold(v, "default") {
			return v
		}
	}
	return c.user
}

// noteSequenceCalls follows what a statement run on shards did to
// sequences: a setval makes every router drop its blocks (this one at
// once, the others when they hear of the schema change it announces);
// a statement on the authoritative shard that may have called nextval
// there makes the session's currval and lastval the shard's as well.
func (c *clientConn) noteSequenceCalls(r *routed, failed bool) {
	if r.setsSequence && !failed {
		c.srv.sequences.drop()
		c.srv.announceSchemaChange(c.database)
	}
	if r.callsSequences && c.seqs.lastSeq != 0 && !c.seqs.shardCalls {
		if shard, err := c.authoritativeShard(); err == nil && slices.Contains(r.shards, shard) {
			c.seqs.shardCalls = true
		}
	}
}

// mayCallSequences reports whether st may call a sequence function where
// it runs, other than for a column the router fills: it calls a function
// that may (nextval in a SELECT, a user's function), or it writes a table
// whose sequences the authoritative shard serves itself, or no table at
// all (DO, CALL).
func (c *clientConn) mayCallSequences(st *plannedStmt) bool {
	if st.SideEffects {
		return true
	}
	if st.ReadOnly {
		return false
	}
	for _, t := range st.Tables {
		if t.Database != c.database || !c.beyondAuthoritative(t.Schema, t.Table) {
			return true
		}
	}
	return len(st.Tables) == 0
}
