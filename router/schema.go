package router

import (
	"context"
	"sync"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// schemaCache answers the planner's catalog questions (the types of
// shard-key columns) from the authoritative shard, which has every
// table's definition because DDL runs everywhere. DDL through the router
// clears it.
type schemaCache struct {
	srv   *Server
	mu    sync.RWMutex
	types map[string]shardfunc.ColumnType
}

func newSchemaCache(srv *Server) *schemaCache {
	return &schemaCache{srv: srv, types: map[string]shardfunc.ColumnType{}}
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

func (sc *schemaCache) clear() {
	sc.mu.Lock()
	sc.types = map[string]shardfunc.ColumnType{}
	sc.mu.Unlock()
}

// schemaChanged forgets what DDL may have changed.
func (s *Server) schemaChanged() {
	s.schema.clear()
	s.planner.Invalidate()
}
