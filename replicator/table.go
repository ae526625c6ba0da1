package replicator

import (
	"context"
	"errors"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// Column is one copied column of a table.
type Column struct {
	Name    string
	TypeOID uint32
	Type    string // format_type, with the modifier: what a literal is cast to
}

// Table is what the copy needs to know of a source table: its columns in
// copy order, the key it is copied in order of, and its shard key.
type Table struct {
	Schema, Name string
	Columns      []Column
	// OrderKey indexes Columns: the primary key, or a unique key of
	// non-null columns, whose order the batches follow.
	OrderKey []int
	// OrderKeyName names the index OrderKey comes from, for messages.
	OrderKeyName string
	ShardKey     int // index into Columns
	ShardKeyType shardfunc.ColumnType
}

// QualifiedName is the table's quoted schema-qualified name.
func (t *Table) QualifiedName() string {
	return pgx.Identifier{t.Schema, t.Name}.Sanitize()
}

// DisplayName is schema.table, unquoted, for progress rows and messages.
func (t *Table) DisplayName() string { return t.Schema + "." + t.Name }

// columnList is the quoted column names in copy order.
func (t *Table) columnList() string {
	names := make([]string, len(t.Columns))
	for i, c := range t.Columns {
		names[i] = pgx.Identifier{c.Name}.Sanitize()
	}
	return strings.Join(names, ", ")
}

// orderKeyList is the quoted order-key columns, in key order.
func (t *Table) orderKeyList() string {
	names := make([]string, len(t.OrderKey))
	for i, k := range t.OrderKey {
		names[i] = pgx.Identifier{t.Columns[k].Name}.Sanitize()
	}
	return strings.Join(names, ", ")
}

// DescribeTable reads a table's columns and copy key from the catalog of
// the database conn is connected to. Generated columns are left out: the
// target computes them itself and COPY cannot write them. A table with
// neither a primary key nor a unique key of non-null columns is refused
// (SQLSTATE 55000) before anything is copied: batches could not be ordered,
// nor a killed copy resumed. So is a shard-key column that is missing or of
// a type that cannot be routed; an empty shardColumn asks for none.
func DescribeTable(ctx context.Context, conn *pgx.Conn, schema, name, shardColumn string) (*Table, error) {
	t := &Table{Schema: schema, Name: name, ShardKey: -1}
	var relid uint32
	err := conn.QueryRow(ctx, `SELECT c.oid FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE n.nspname = $1 AND c.relname = $2 AND c.relkind IN ('r', 'p')`, schema, name).Scan(&relid)
	if errors.Is(err, pgx.ErrNoRows) {
		return nil, pgerr.New("42P01", "table %s.%s does not exist on the source", schema, name)
	}
	if err != nil {
		return nil, err
	}
	rows, err := conn.Query(ctx, `SELECT attnum, attname, atttypid, format_type(atttypid, atttypmod)
		FROM pg_attribute WHERE attrelid = $1 AND attnum > 0 AND NOT attisdropped AND attgenerated = ''
		ORDER BY attnum`, relid)
	if err != nil {
		return nil, err
	}
	byAttnum := map[int16]int{}
	for rows.Next() {
		var attnum int16
		var c Column
		if err := rows.Scan(&attnum, &c.Name, &c.TypeOID, &c.Type); err != nil {
			return nil, err
		}
		byAttnum[attnum] = len(t.Columns)
		if c.Name == shardColumn {
			t.ShardKey = len(t.Columns)
		}
		t.Columns = append(t.Columns, c)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	// No shard column: the table is copied or streamed within its shard
	// (OnlineDDL's shadow table), and ShardKey stays -1.
	if shardColumn != "" {
		if t.ShardKey < 0 {
			return nil, pgerr.New("42703", "table %s has no column %q to shard by", t.DisplayName(), shardColumn)
		}
		typ, ok := shardfunc.TypeForOID(t.Columns[t.ShardKey].TypeOID)
		if !ok {
			return nil, pgerr.New(pgerr.FeatureNotSupported, "shard-key column %s.%s is of type %s, which cannot be routed",
				t.DisplayName(), shardColumn, t.Columns[t.ShardKey].Type)
		}
		t.ShardKeyType = typ
	}

	// The primary key first, then the unique key with the fewest columns.
	// Partial, expression, deferrable and invalid indexes cannot promise
	// one row per key value at any moment, and a nullable column lets
	// several rows share a key.
	rows, err = conn.Query(ctx, `SELECT i.indexrelid::regclass::text, (i.indkey::int2[])[0:i.indnkeyatts-1],
			bool_and(a.attnotnull)
		FROM pg_index i JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = ANY ((i.indkey::int2[])[0:i.indnkeyatts-1])
		WHERE i.indrelid = $1 AND i.indisunique AND i.indisvalid AND i.indimmediate
			AND i.indpred IS NULL AND i.indexprs IS NULL
		GROUP BY i.indexrelid, i.indkey, i.indnkeyatts, i.indisprimary
		ORDER BY i.indisprimary DESC, i.indnkeyatts, i.indexrelid`, relid)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	for rows.Next() {
		var index string
		var attnums []int16
		var notNull bool
		if err := rows.Scan(&index, &attnums, &notNull); err != nil {
			return nil, err
		}
		if !notNull || len(t.OrderKey) > 0 {
			continue
		}
		key := make([]int, 0, len(attnums))
		for _, a := range attnums {
			i, ok := byAttnum[a]
			if !ok {
				break // a generated column: not copied, so no key of ours
			}
			key = append(key, i)
		}
		if len(key) == len(attnums) {
			t.OrderKey, t.OrderKeyName = key, index
		}
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	if len(t.OrderKey) == 0 {
		return nil, &pgerr.Error{
			Code:    pgerr.ObjectNotInPrerequisiteState,
			Message: "table " + t.DisplayName() + " has neither a primary key nor a unique key of non-null columns: it cannot be copied",
			Detail:  "the copy reads in key order so that a stopped copy resumes after the last key it wrote; add a primary key",
		}
	}
	return t, nil
}
