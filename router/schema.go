package router

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/router/planner"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// schemaCache answers the planner's catalog questions (the types of
// shard-key columns, the columns of a table, which functions are
// aggregates) from the authoritative shard, which has every table's and
// function's definition because DDL runs everywhere. DDL through the
// router clears it, and so does the end of a transaction that ran DDL.
type schemaCache struct {
	srv      *Server
	mu       sync.RWMutex
	types    map[string]shardfunc.ColumnType
	columns  map[string][]string              // by db, schema, table
	colls    map[string]planner.TextCollation // by db, schema, table, column
	typmods  map[string]int32                 // by db, schema, table, column
	routines map[string]*planner.Routines     // by db
	views    map[string]*planner.Views        // by db
	funcs    map[string]*planner.Functions    // by db
	// generation counts clears, so that a snapshot read while DDL ran
	// is not kept after it.
	generation uint64
}

func newSchemaCache(srv *Server) *schemaCache {
	return &schemaCache{srv: srv, types: map[string]shardfunc.ColumnType{}, columns: map[string][]string{},
		colls: map[string]planner.TextCollation{}, typmods: map[string]int32{}, routines: map[string]*planner.Routines{}, views: map[string]*planner.Views{}, funcs: map[string]*planner.Functions{}}
}

// Routines returns the database's aggregate and window functions, for
// the planner to tell my_sum(x) from a plain function.
func (sc *schemaCache) Routines(db string) (*planner.Routines, error) {
	return cachedByDB(sc, func(sc *schemaCache) map[string]*planner.Routines { return sc.routines }, db, func() (*planner.Routines, error) {
		rows, err := sc.srv.adminQuery(context.Background(), db, `SELECT n.nspname, p.proname
			FROM pg_catalog.pg_proc p JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
			WHERE p.prokind IN ('a', 'w')`)
		if err != nil {
			return nil, err
		}
		pairs := make([][2]string, len(rows))
		for i, row := range rows {
			pairs[i] = [2]string{row[0], row[1]}
		}
		return planner.NewRoutines(pairs), nil
	})
}

// Views returns the database's views and materialized views with the
// relations each one's rules read, and the tables with rules of their own
// (CREATE RULE) with the relations those name, for the planner to refuse
// a view over tables placed elsewhere, or a write a rule redirects there
// (planner/views.go).
func (sc *schemaCache) Views(db string) (*planner.Views, error) {
	return cachedByDB(sc, func(sc *schemaCache) map[string]*planner.Views { return sc.views }, db, func() (*planner.Views, error) {
		rows, err := sc.srv.adminQuery(context.Background(), db, `SELECT DISTINCT vn.nspname, v.relname, tn.nspname, t.relname, v.relkind IN ('v', 'm')
			FROM pg_catalog.pg_class v
			JOIN pg_catalog.pg_namespace vn ON vn.oid = v.relnamespace
			JOIN pg_catalog.pg_rewrite r ON r.ev_class = v.oid
			JOIN pg_catalog.pg_depend d ON d.classid = 'pg_catalog.pg_rewrite'::pg_catalog.regclass AND d.objid = r.oid
				AND d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass
			JOIN pg_catalog.pg_class t ON t.oid = d.refobjid AND t.oid <> v.oid
			JOIN pg_catalog.pg_namespace tn ON tn.oid = t.relnamespace
			WHERE (v.relkind IN ('v', 'm') OR r.rulename <> '_RETURN') AND vn.nspname NOT IN ('pg_catalog', 'information_schema')
				AND tn.nspname NOT IN ('pg_catalog', 'information_schema')`)
		if err != nil {
			return nil, err
		}
		var views, rules [][4]string
		for _, row := range rows {
			if row[4] == "t" {
				views = append(views, [4]string{row[0], row[1], row[2], row[3]})
			} else {
				rules = append(rules, [4]string{row[0], row[1], row[2], row[3]})
			}
		}
		return planner.NewViews(views, rules), nil
	})
}

// UniqueIndexes returns a table's unique indexes and exclusion
// constraints with their key columns, for the planner to check an ON
// CONFLICT's arbiters (planner/arbiter.go). Asked only for an INSERT ...
// ON CONFLICT into a sharded table naming no columns; not cached (the
// plan is).
func (sc *schemaCache) UniqueIndexes(db, schema, table string) ([]planner.UniqueIndex, error) {
	rows, err := sc.srv.adminQuery(context.Background(), db, `SELECT ic.relname, COALESCE(con.conname, ''),
			(SELECT pg_catalog.string_agg(COALESCE(a.attname, ''), chr(31) ORDER BY k.ord)
			 FROM pg_catalog.unnest(i.indkey::int2[]) WITH ORDINALITY k(attnum, ord)
			 LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum AND k.attnum > 0
			 WHERE k.ord <= i.indnkeyatts)
		FROM pg_catalog.pg_index i
		JOIN pg_catalog.pg_class ic ON ic.oid = i.indexrelid
		JOIN pg_catalog.pg_class c ON c.oid = i.indrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_catalog.pg_constraint con ON con.conindid = i.indexrelid AND con.conrelid = i.indrelid AND con.contype IN ('p', 'u', 'x')
		WHERE (i.indisunique OR i.indisexclusion) AND n.nspname = `+pgwire.QuoteLiteral(schema)+` AND c.relname = `+pgwire.QuoteLiteral(table))
	if err != nil {
		return nil, err
	}
	out := make([]planner.UniqueIndex, len(rows))
	for i, r := range rows {
		out[i] = planner.UniqueIndex{Name: r[0], Constraint: r[1], Columns: strings.Split(r[2], "\x1f")}
	}
	return out, nil
}

// ColumnTypmod returns a column's type modifier (atttypmod: -1 for none),
// for the planner to tell numeric(15,2) from an unconstrained numeric.
func (sc *schemaCache) ColumnTypmod(db, schema, table, column string) (int32, error) {
	key := db + "\x00" + schema + "\x00" + table + "\x00" + column
	sc.mu.RLock()
	mod, ok := sc.typmods[key]
	sc.mu.RUnlock()
	if ok {
		return mod, nil
	}
	rows, err := sc.srv.adminQuery(context.Background(), db, `SELECT a.atttypmod
		FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = `+pgwire.QuoteLiteral(schema)+` AND c.relname = `+pgwire.QuoteLiteral(table)+` AND a.attname = `+pgwire.QuoteLiteral(column)+` AND NOT a.attisdropped`)
	if err != nil {
		return 0, err
	}
	if len(rows) != 1 {
		return 0, pgerr.New("42703", "column %q of relation %s.%s does not exist", column, schema, table)
	}
	n, err := strconv.ParseInt(rows[0][0], 10, 32)
	if err != nil {
		return 0, err
	}
	sc.mu.Lock()
	sc.typmods[key] = int32(n)
	sc.mu.Unlock()
	return int32(n), nil
}

// Functions returns the database's functions in SQL, PL/pgSQL and other
// procedural languages (not C or internal ones; those of
// extensions aside) with the statements of their bodies, and its
// triggers, for the planner to refuse a call of a function, or a write
// firing a trigger, that reads tables on other shards
// (planner/functions.go).
func (sc *schemaCache) Functions(db string) (*planner.Functions, error) {
	return cachedByDB(sc, func(sc *schemaCache) map[string]*planner.Functions { return sc.funcs }, db, func() (*planner.Functions, error) {
		rows, err := sc.srv.adminQuery(context.Background(), db, `SELECT n.nspname, p.proname, l.lanname, p.prosrc,
				CASE WHEN l.lanname = 'plpgsql' OR p.prosqlbody IS NOT NULL THEN pg_catalog.pg_get_functiondef(p.oid) ELSE '' END
			FROM pg_catalog.pg_proc p
			JOIN pg_catalog.pg_namespace n ON n.oid = p.pronamespace
			JOIN pg_catalog.pg_language l ON l.oid = p.prolang
			WHERE l.lanname NOT IN ('internal', 'c') AND p.prokind IN ('f', 'p')
				AND n.nspname NOT IN ('pg_catalog', 'information_schema')
				AND NOT EXISTS (SELECT 1 FROM pg_catalog.pg_depend d
					WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND d.objid = p.oid AND d.deptype = 'e')`)
		if err != nil {
			return nil, err
		}
		bodies := make([]planner.FunctionBody, 0, len(rows))
		for _, r := range rows {
			b := planner.FunctionBody{Schema: r[0], Name: r[1]}
			switch {
			case r[2] == "plpgsql":
				b.SQL, b.Opaque = planner.PLpgSQLStatements(r[4])
			case r[2] != "sql":
				// plpython, plperl, ...: it may run any SQL.
				b.Opaque = true
			case r[4] != "":
				b.SQL = []string{r[4]} // BEGIN ATOMIC: the whole CREATE FUNCTION parses
			default:
				b.SQL = []string{r[3]}
			}
			bodies = append(bodies, b)
		}
		rows, err = sc.srv.adminQuery(context.Background(), db, `SELECT n.nspname, c.relname, fn.nspname, p.proname
			FROM pg_catalog.pg_trigger tg
			JOIN pg_catalog.pg_class c ON c.oid = tg.tgrelid
			JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
			JOIN pg_catalog.pg_proc p ON p.oid = tg.tgfoid
			JOIN pg_catalog.pg_namespace fn ON fn.oid = p.pronamespace
			WHERE NOT tg.tgisinternal`)
		if err != nil {
			return nil, err
		}
		triggers := make([]planner.Trigger, len(rows))
		for i, r := range rows {
			triggers[i] = planner.Trigger{TableSchema: r[0], Table: r[1], FuncSchema: r[2], Func: r[3]}
		}
		return planner.NewFunctions(bodies, triggers), nil
	})
}

// cachedByDB returns the snapshot pick(sc) holds for db, or loads it and
// keeps it unless the cache was cleared meanwhile (DDL ran while it was
// read: it may not show that DDL).
func cachedByDB[T any](sc *schemaCache, pick func(*schemaCache) map[string]T, db string, load func() (T, error)) (T, error) {
	sc.mu.RLock()
	v, ok := pick(sc)[db]
	generation := sc.generation
	sc.mu.RUnlock()
	if ok {
		return v, nil
	}
	v, err := load()
	if err != nil {
		return v, err
	}
	sc.mu.Lock()
	if sc.generation == generation {
		pick(sc)[db] = v
	}
	sc.mu.Unlock()
	return v, nil
}

// ColumnNames returns a table's columns in order, for an INSERT without
// a column list.
func (sc *schemaCache) ColumnNames(db, schema, table string) ([]string, error) {
	key := db + "\x00" + schema + "\x00" + table
	sc.mu.RLock()
	cols, ok := sc.columns[key]
	sc.mu.RUnlock()
	if ok {
		return cols, nil
	}
	rows, err := sc.srv.adminQuery(context.Background(), db, `SELECT a.attname
		FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = `+pgwire.QuoteLiteral(schema)+` AND c.relname = `+pgwire.QuoteLiteral(table)+`
		AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum`)
	if err != nil {
		return nil, err
	}
	if len(rows) == 0 {
		return nil, pgerr.New("42P01", "relation %s.%s does not exist", schema, table)
	}
	for _, r := range rows {
		cols = append(cols, r[0])
	}
	sc.mu.Lock()
	sc.columns[key] = cols
	sc.mu.Unlock()
	return cols, nil
}

// ColumnType returns the type of db.schema.table.column.
func (sc *schemaCache) ColumnType(db, schema, table, column string) (shardfunc.ColumnType, error) {
	key := db + "\x00" + schema + "\x00" + table + "\x00" + column
	sc.mu.RLock()
	t, ok := sc.types[key]
	sc.mu.RUnlock()
	if ok {
		return t, nil
	}
	rows, err := sc.srv.adminQuery(context.Background(), db, `SELECT pg_catalog.format_type(a.atttypid, NULL)
		FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = `+pgwire.QuoteLiteral(schema)+` AND c.relname = `+pgwire.QuoteLiteral(table)+` AND a.attname = `+pgwire.QuoteLiteral(column)+` AND NOT a.attisdropped`)
	if err != nil {
		return 0, err
	}
	if len(rows) == 0 {
		return 0, pgerr.New("42703", "column %q of relation %s.%s does not exist (needed to route by it)", column, schema, table)
	}
	t, err = shardfunc.ParseColumnType(rows[0][0])
	if err != nil {
		return 0, err
	}
	sc.mu.Lock()
	sc.types[key] = t
	sc.mu.Unlock()
	return t, nil
}

// TextCollation says whether db.schema.table.column orders by the bytes
// of its UTF-8 values (a collation, its own or the database's default,
// that is libc's C or POSIX, in a UTF8 database: the router's engine then
// orders its values itself) and whether its collation is
// nondeterministic (equal values of other bytes: never grouped by bytes).
func (sc *schemaCache) TextCollation(db, schema, table, column string) (planner.TextCollation, error) {
	key := db + "\x00" + schema + "\x00" + table + "\x00" + column
	sc.mu.RLock()
	coll, ok := sc.colls[key]
	sc.mu.RUnlock()
	if ok {
		return coll, nil
	}
	rows, err := sc.srv.adminQuery(context.Background(), db, `SELECT CASE
			WHEN a.attcollation = 0 OR pg_catalog.getdatabaseencoding() <> 'UTF8' THEN false
			WHEN co.collname = 'default' AND co.collnamespace = 'pg_catalog'::regnamespace THEN
				(SELECT d.datlocprovider = 'c' AND d.datcollate IN ('C', 'POSIX') FROM pg_catalog.pg_database d
				 WHERE d.datname = pg_catalog.current_database())
			ELSE co.collprovider = 'c' AND co.collcollate IN ('C', 'POSIX') END,
			NOT COALESCE(co.collisdeterministic, true)
		FROM pg_catalog.pg_attribute a JOIN pg_catalog.pg_class c ON c.oid = a.attrelid
		JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_catalog.pg_collation co ON co.oid = a.attcollation
		WHERE n.nspname = `+pgwire.QuoteLiteral(schema)+` AND c.relname = `+pgwire.QuoteLiteral(table)+` AND a.attname = `+pgwire.QuoteLiteral(column)+` AND NOT a.attisdropped`)
	if err != nil {
		return planner.TextCollation{}, err
	}
	if len(rows) != 1 {
		return planner.TextCollation{}, pgerr.New("42703", "column %q of relation %s.%s does not exist", column, schema, table)
	}
	coll = planner.TextCollation{ByteOrder: rows[0][0] == "t", Nondeterministic: rows[0][1] == "t"}
	sc.mu.Lock()
	sc.colls[key] = coll
	sc.mu.Unlock()
	return coll, nil
}

func (sc *schemaCache) clear() {
	sc.mu.Lock()
	sc.types = map[string]shardfunc.ColumnType{}
	sc.columns = map[string][]string{}
	sc.colls = map[string]planner.TextCollation{}
	sc.typmods = map[string]int32{}
	sc.routines = map[string]*planner.Routines{}
	sc.views = map[string]*planner.Views{}
	sc.funcs = map[string]*planner.Functions{}
	sc.generation++
	sc.mu.Unlock()
}

// schemaChanged forgets what DDL may have changed.
func (s *Server) schemaChanged() {
	s.schema.clear()
	s.planner.Invalidate()
	s.sequences.drop()
}

// A client's statement is prepared on the shards under a name made of its
// text, its parameter types and the schema epoch its client prepared it
// in (prepared.shardName): the time of the latest schema change the router
// knows, announced in etcd (store.SchemaChange.At), so that routers agree
// on it. Postgres fixes a prepared statement's result and parameter types
// when it is prepared: a session whose client prepares the statement
// after a change must not get one a backend prepared before it (it would
// fail with 0A000 "cached plan must not change result type", where one
// Postgres plans the new statement afresh), while a session that
// prepared it before the change keeps the old one and gets that 0A000,
// as on one Postgres.

// noteSchemaEpoch moves the schema epoch to at, if later.
func (s *Server) noteSchemaEpoch(at time.Time) {
	n := at.UnixNano()
	for {
		old := s.schemaEpoch.Load()
		if n <= old || s.schemaEpoch.CompareAndSwap(old, n) {
			return
		}
	}
}
