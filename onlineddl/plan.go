package onlineddl

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/ddl"
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/workflows"
)

// PlanOnlineDDL classifies the statement and finds the shards that hold
// its table, changing nothing. The table (for DROP INDEX, the index's) is
// looked up on each candidate shard (the given ones, else every shard of
// the topology: the router creates a table on every shard); the first
// holder's catalog gives the classifier its facts (a column's type for
// ALTER COLUMN TYPE, a CHECK that proves SET NOT NULL). A statement that
// does not parse, or a table no shard holds, is refused; a given shard
// without the table too, before anything runs.
func (a *Activities) PlanOnlineDDL(ctx context.Context, in workflows.PlanOnlineDDLInput) (workflows.OnlineDDLPlan, error) {
	r := in.Input
	if r.Database == "" || r.SQL == "" {
		return workflows.OnlineDDLPlan{}, refuse(pgerr.InvalidParameterValue, "database and sql are required")
	}
	c, err := ddl.Classify(r.SQL, nil)
	if err != nil {
		return workflows.OnlineDDLPlan{}, refuse("42601", "%v", err)
	}
	if c.Path == ddl.Refused {
		return planOf(c, nil), nil
	}
	candidates, err := a.everyShard(ctx, r.Shards)
	if err != nil {
		return workflows.OnlineDDLPlan{}, activityError(err)
	}
	var holders, missing []string
	var facts *ddl.TableFacts
	for _, shard := range candidates {
		found, f, err := a.lookUp(ctx, shard, r.Database, &c, facts == nil)
		if err != nil {
			return workflows.OnlineDDLPlan{}, activityError(err)
		}
		if !found {
			missing = append(missing, shard)
			continue
		}
		holders = append(holders, shard)
		if facts == nil {
			facts = f
		}
	}
	name := objectName(c)
	switch {
	case len(holders) == 0:
		return workflows.OnlineDDLPlan{}, refuse("42P01", "%s does not exist on any of %s", name, strings.Join(candidates, ", "))
	case len(r.Shards) > 0 && len(missing) > 0:
		return workflows.OnlineDDLPlan{}, refuse("42P01", "%s does not exist on %s", name, strings.Join(missing, ", "))
	}
	if c.Execution == ddl.InTransaction && c.Index == "" {
		// The catalog may prove what the statement alone cannot.
		if c2, err := ddl.Classify(r.SQL, facts); err == nil {
			c2.Schema, c2.Table = c.Schema, c.Table
			c = c2
		}
	}
	return planOf(c, holders), nil
}

func planOf(c ddl.Classification, shards []string) workflows.OnlineDDLPlan {
	return workflows.OnlineDDLPlan{
		Path: string(c.Path), Reason: c.Reason(), Execution: string(c.Execution),
		Schema: c.Schema, Table: c.Table, Index: c.Index, Shards: shards,
	}
}

func objectName(c ddl.Classification) string {
	if c.Table != "" {
		return "relation " + qualified(c.Schema, c.Table)
	}
	return "index " + qualified(c.IndexSchema, c.Index)
}

func qualified(schema, name string) string {
	if schema == "" {
		return name
	}
	return schema + "." + name
}

// lookUp finds the statement's table on one shard and fills c's schema
// (and, for DROP INDEX, table) from its catalog; with wantFacts it reads
// the table's facts too.
func (a *Activities) lookUp(ctx context.Context, shard, database string, c *ddl.Classification, wantFacts bool) (bool, *ddl.TableFacts, error) {
	conn, err := a.connect(ctx, shard, database)
	if err != nil {
		return false, nil, err
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var schema, table string
	var oid uint32
	if c.Table != "" {
		err = conn.QueryRow(ctx, `SELECT n.nspname, c.relname, c.oid FROM pg_class c
			JOIN pg_namespace n ON n.oid = c.relnamespace
			WHERE c.oid = to_regclass($1) AND c.relkind IN ('r', 'p')`, ident(c.Schema, c.Table)).Scan(&schema, &table, &oid)
	} else {
		err = conn.QueryRow(ctx, `SELECT n.nspname, t.relname, t.oid FROM pg_index i
			JOIN pg_class t ON t.oid = i.indrelid JOIN pg_namespace n ON n.oid = t.relnamespace
			WHERE i.indexrelid = to_regclass($1)`, ident(c.IndexSchema, c.Index)).Scan(&schema, &table, &oid)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return false, nil, nil
	}
	if err != nil {
		return false, nil, fmt.Errorf("shard %s: looking up %s: %w", shard, objectName(*c), err)
	}
	if c.Schema == "" {
		c.Schema = schema
	}
	if c.Table == "" {
		c.Table = table
	}
	if !wantFacts {
		return true, nil, nil
	}
	facts, err := tableFacts(ctx, conn, oid)
	if err != nil {
		return false, nil, fmt.Errorf("shard %s: reading the catalog of %s: %w", shard, qualified(schema, table), err)
	}
	return true, facts, nil
}

// tableFacts reads each column's type and whether a validated CHECK
// (col IS NOT NULL) covers it.
func tableFacts(ctx context.Context, conn *pgx.Conn, oid uint32) (*ddl.TableFacts, error) {
	rows, err := conn.Query(ctx, `SELECT a.attname, format_type(a.atttypid, a.atttypmod),
			EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conrelid = a.attrelid AND k.contype = 'c'
				AND k.convalidated AND pg_get_constraintdef(k.oid) = 'CHECK ((' || quote_ident(a.attname) || ' IS NOT NULL))')
		FROM pg_attribute a WHERE a.attrelid = $1 AND a.attnum > 0 AND NOT a.attisdropped`, oid)
	if err != nil {
		return nil, err
	}
	f := &ddl.TableFacts{ColumnTypes: map[string]string{}, ProvenNotNull: map[string]bool{}}
	var name, typ string
	var proven bool
	_, err = pgx.ForEachRow(rows, []any{&name, &typ, &proven}, func() error {
		f.ColumnTypes[name] = typ
		if proven {
			f.ProvenNotNull[name] = true
		}
		return nil
	})
	return f, err
}

// ident quotes a possibly schema-qualified name for to_regclass: the
// parser has already folded unquoted names to lower case.
func ident(schema, name string) string {
	if schema == "" {
		return pgx.Identifier{name}.Sanitize()
	}
	return pgx.Identifier{schema, name}.Sanitize()
}
