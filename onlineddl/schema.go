package onlineddl

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/ddl"
	"github.com/tesseradb/tessera/workflows"
)

// userTables selects the tables the schema check compares: not the
// catalogs, not Tessera's own _tessera schema.
const userTables = `c.relkind IN ('r', 'p') AND n.nspname NOT IN ('information_schema', '_tessera')
	AND n.nspname NOT LIKE 'pg\_%'`

// CheckSchema reads every table's definition (columns with their types,
// nullability and defaults, constraints, indexes) on each shard and
// reports each table whose definition differs between the shards that
// hold it, compared with the first of them (the authoritative shard when
// it holds the table).
func (a *Activities) CheckSchema(ctx context.Context, in workflows.SchemaCheckInput) (workflows.SchemaCheckResult, error) {
	shards, err := a.everyShard(ctx, in.Shards)
	if err != nil {
		return workflows.SchemaCheckResult{}, activityError(err)
	}
	schemas := map[string]ddl.Schema{}
	tables := map[string]bool{}
	for _, shard := range shards {
		s, err := a.readSchema(ctx, shard, in.Database)
		if err != nil {
			return workflows.SchemaCheckResult{}, activityError(err)
		}
		schemas[shard] = s
		for t := range s {
			tables[t] = true
		}
	}
	res := workflows.SchemaCheckResult{Database: in.Database, Shards: shards, Tables: len(tables), Differences: []workflows.SchemaDifference{}}
	for _, d := range ddl.Compare(shards, schemas) {
		res.Differences = append(res.Differences, workflows.SchemaDifference(d))
	}
	return res, nil
}

func (a *Activities) readSchema(ctx context.Context, shard, database string) (ddl.Schema, error) {
	conn, err := a.connect(ctx, shard, database)
	if err != nil {
		return nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	s, err := ReadSchema(ctx, conn)
	if err != nil {
		return nil, fmt.Errorf("shard %s: reading the schema of %s: %w", shard, database, err)
	}
	return s, nil
}

// ReadSchema reads the definition of every user table of conn's database.
func ReadSchema(ctx context.Context, conn *pgx.Conn) (ddl.Schema, error) {
	s := ddl.Schema{}
	def := func(table string) ddl.TableDef {
		d := s[table]
		if d.Constraints == nil {
			d.Constraints, d.Indexes = map[string]string{}, map[string]string{}
		}
		return d
	}
	var table, name, a, b string
	var notNull bool
	rows, err := conn.Query(ctx, `SELECT n.nspname || '.' || c.relname, a.attname, format_type(a.atttypid, a.atttypmod),
			a.attnotnull, coalesce(pg_get_expr(d.adbin, d.adrelid), '')
		FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
		WHERE a.attnum > 0 AND NOT a.attisdropped AND `+userTables+`
		ORDER BY 1, a.attnum`)
	if err != nil {
		return nil, err
	}
	if _, err := pgx.ForEachRow(rows, []any{&table, &name, &a, &notNull, &b}, func() error {
		d := def(table)
		d.Columns = append(d.Columns, ddl.ColumnDef{Name: name, Type: a, NotNull: notNull, Default: b})
		s[table] = d
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err = conn.Query(ctx, `SELECT n.nspname || '.' || c.relname, k.conname, pg_get_constraintdef(k.oid)
		FROM pg_constraint k JOIN pg_class c ON c.oid = k.conrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE `+userTables)
	if err != nil {
		return nil, err
	}
	if _, err := pgx.ForEachRow(rows, []any{&table, &name, &a}, func() error {
		def(table).Constraints[name] = a
		return nil
	}); err != nil {
		return nil, err
	}
	rows, err = conn.Query(ctx, `SELECT n.nspname || '.' || c.relname, ic.relname,
			pg_get_indexdef(i.indexrelid) || CASE WHEN i.indisvalid THEN '' ELSE ' INVALID' END
		FROM pg_index i JOIN pg_class ic ON ic.oid = i.indexrelid
		JOIN pg_class c ON c.oid = i.indrelid JOIN pg_namespace n ON n.oid = c.relnamespace
		WHERE `+userTables)
	if err != nil {
		return nil, err
	}
	_, err = pgx.ForEachRow(rows, []any{&table, &name, &a}, func() error {
		def(table).Indexes[name] = a
		return nil
	})
	return s, err
}
