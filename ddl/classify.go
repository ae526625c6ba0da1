package ddl

import (
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// Path is how an online schema change is carried out.
type Path string

const (
	// Direct: Postgres makes the change without rewriting or scanning the
	// table under a strong lock, so it runs as written on every shard,
	// with a short lock_timeout and retries.
	Direct Path = "direct"
	// Shadow: the change rewrites the table, or scans it while holding
	// ACCESS EXCLUSIVE; it must go through a shadow table kept current by
	// change data capture and swapped in by rename (planned).
	Shadow Path = "shadow"
	// Refused: not a schema change of one table that OnlineDDL handles.
	Refused Path = "refused"
)

// severity orders paths: a statement takes its most demanding change's.
func (p Path) severity() int {
	switch p {
	case Direct:
		return 0
	case Shadow:
		return 1
	}
	return 2
}

// Execution is how a direct change runs on a shard.
type Execution string

const (
	// InTransaction: the statement runs in a transaction with a short
	// lock_timeout, together with the row that records it as applied.
	InTransaction Execution = "transaction"
	// CreateIndexConcurrently runs outside a transaction; a failed build
	// leaves an INVALID index, dropped before the next attempt.
	CreateIndexConcurrently Execution = "create_index_concurrently"
	// DropIndexConcurrently runs outside a transaction; done once the
	// index is gone.
	DropIndexConcurrently Execution = "drop_index_concurrently"
)

// Classification says which path a statement takes and why.
type Classification struct {
	Path Path `json:"path"`
	// Reasons says why, one line per change the statement makes.
	Reasons []string `json:"reasons"`
	// Schema and Table name the table changed ("" schema: the search
	// path's, i.e. public). For DROP INDEX they are empty: the statement
	// names only the index, whose table the caller looks up.
	Schema string `json:"schema,omitempty"`
	Table  string `json:"table,omitempty"`
	// Index is the index a CREATE or DROP INDEX names.
	Index       string    `json:"index,omitempty"`
	IndexSchema string    `json:"index_schema,omitempty"`
	Execution   Execution `json:"execution,omitempty"`
}

// Reason is the reasons as one line.
func (c Classification) Reason() string { return strings.Join(c.Reasons, "; ") }

// TableFacts is what the classifier cannot read from the statement: the
// table's current catalog, as one shard holds it. A nil *TableFacts proves
// nothing.
type TableFacts struct {
	// ColumnTypes maps a column to its type as format_type() writes it,
	// e.g. "character varying(20)".
	ColumnTypes map[string]string `json:"column_types,omitempty"`
	// ProvenNotNull holds the columns a validated CHECK (col IS NOT NULL)
	// constraint covers: SET NOT NULL then skips its scan.
	ProvenNotNull map[string]bool `json:"proven_not_null,omitempty"`
}

// Classify parses sql, which must be one statement, and says which path
// it takes. A parse error is returned as such; anything that parses gets a
// classification, refused ones included.
func Classify(sql string, facts *TableFacts) (Classification, error) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		return Classification{}, err
	}
	if len(tree.Stmts) != 1 {
		return refused("OnlineDDL takes exactly one statement, not %d", len(tree.Stmts)), nil
	}
	c := &classifier{facts: facts}
	switch n := tree.Stmts[0].Stmt.GetNode().(type) {
	case *pg_query.Node_AlterTableStmt:
		c.alterTable(n.AlterTableStmt)
	case *pg_query.Node_RenameStmt:
		c.rename(n.RenameStmt)
	case *pg_query.Node_IndexStmt:
		c.createIndex(n.IndexStmt)
	case *pg_query.Node_DropStmt:
		c.dropIndex(n.DropStmt)
	default:
		return refused("not a schema change of one table (ALTER TABLE, CREATE INDEX or DROP INDEX): run it through the router"), nil
	}
	return c.out, nil
}

func refused(format string, args ...any) Classification {
	return Classification{Path: Refused, Reasons: []string{fmt.Sprintf(format, args...)}}
}

type classifier struct {
	facts *TableFacts
	out   Classification
}

// add records one change's path and reason; the statement's path is the
// most demanding one.
func (c *classifier) add(p Path, format string, args ...any) {
	if c.out.Path == "" || p.severity() > c.out.Path.severity() {
		c.out.Path = p
	}
	c.out.Reasons = append(c.out.Reasons, fmt.Sprintf(format, args...))
}

func (c *classifier) table(rv *pg_query.RangeVar) {
	c.out.Schema, c.out.Table = rv.GetSchemaname(), rv.GetRelname()
}

func (c *classifier) alterTable(s *pg_query.AlterTableStmt) {
	if s.Objtype != pg_query.ObjectType_OBJECT_TABLE || s.Relation == nil {
		c.add(Refused, "only ALTER TABLE is handled, not ALTER %s", objectWord(s.Objtype))
		return
	}
	c.table(s.Relation)
	c.out.Execution = InTransaction
	for _, n := range s.Cmds {
		c.alterCmd(n.GetAlterTableCmd())
	}
}

func (c *classifier) alterCmd(cmd *pg_query.AlterTableCmd) {
	col := cmd.Name
	switch cmd.Subtype {
	case pg_query.AlterTableType_AT_AddColumn:
		c.addColumn(cmd.Def.GetColumnDef())
	case pg_query.AlterTableType_AT_DropColumn:
		c.add(Direct, "DROP COLUMN %s only marks the column dropped in the catalog", col)
	case pg_query.AlterTableType_AT_ColumnDefault:
		if cmd.Def == nil {
			c.add(Direct, "DROP DEFAULT of %s changes only the catalog", col)
		} else {
			c.add(Direct, "SET DEFAULT of %s changes only the catalog (existing rows keep their values)", col)
		}
	case pg_query.AlterTableType_AT_DropNotNull:
		c.add(Direct, "DROP NOT NULL of %s changes only the catalog", col)
	case pg_query.AlterTableType_AT_SetNotNull:
		if c.facts != nil && c.facts.ProvenNotNull[col] {
			c.add(Direct, "SET NOT NULL of %s: a validated CHECK (%s IS NOT NULL) proves it, so Postgres skips the scan", col, col)
		} else {
			c.add(Shadow, "SET NOT NULL of %s scans the whole table under ACCESS EXCLUSIVE (add CHECK (%s IS NOT NULL) NOT VALID and VALIDATE it first, and it becomes direct)", col, col)
		}
	case pg_query.AlterTableType_AT_AddConstraint:
		c.addConstraint(cmd.Def.GetConstraint())
	case pg_query.AlterTableType_AT_ValidateConstraint:
		c.add(Direct, "VALIDATE CONSTRAINT %s scans under SHARE UPDATE EXCLUSIVE, which lets writes through", col)
	case pg_query.AlterTableType_AT_DropConstraint:
		c.add(Direct, "DROP CONSTRAINT %s changes only the catalog", col)
	case pg_query.AlterTableType_AT_AlterColumnType:
		c.alterType(col, cmd.Def.GetColumnDef())
	case pg_query.AlterTableType_AT_SetStatistics, pg_query.AlterTableType_AT_SetStorage,
		pg_query.AlterTableType_AT_SetCompression, pg_query.AlterTableType_AT_SetRelOptions,
		pg_query.AlterTableType_AT_ResetRelOptions, pg_query.AlterTableType_AT_ReplicaIdentity,
		pg_query.AlterTableType_AT_ClusterOn, pg_query.AlterTableType_AT_DropCluster:
		c.add(Direct, "%s changes only the catalog", cmdWord(cmd.Subtype))
	case pg_query.AlterTableType_AT_SetTableSpace, pg_query.AlterTableType_AT_SetLogged,
		pg_query.AlterTableType_AT_SetUnLogged:
		c.add(Shadow, "%s rewrites the table under ACCESS EXCLUSIVE", cmdWord(cmd.Subtype))
	default:
		c.add(Refused, "%s is not handled by OnlineDDL: run it through the router", cmdWord(cmd.Subtype))
	}
}

func (c *classifier) addColumn(def *pg_query.ColumnDef) {
	name := def.GetColname()
	if t := typeName(def.GetTypeName()); !builtinTypes[t] {
		if serialTypes[t] {
			c.add(Shadow, "ADD COLUMN %s %s fills every row from a sequence (a volatile default): the table is rewritten", name, t)
		} else {
			c.add(Shadow, "ADD COLUMN %s: type %s is not a built-in type OnlineDDL knows; a domain with constraints forces a rewrite", name, t)
		}
		return
	}
	for _, n := range def.GetConstraints() {
		con := n.GetConstraint()
		switch con.GetContype() {
		case pg_query.ConstrType_CONSTR_NULL, pg_query.ConstrType_CONSTR_NOTNULL:
		case pg_query.ConstrType_CONSTR_DEFAULT:
			if why, ok := nonVolatile(con.GetRawExpr()); !ok {
				c.add(Shadow, "ADD COLUMN %s: the default %s may be volatile, which rewrites the table", name, why)
				return
			}
		case pg_query.ConstrType_CONSTR_IDENTITY, pg_query.ConstrType_CONSTR_GENERATED:
			c.add(Shadow, "ADD COLUMN %s: an identity or stored generated column is computed for every row, rewriting the table", name)
			return
		default:
			c.add(Shadow, "ADD COLUMN %s with a %s constraint builds or checks it under ACCESS EXCLUSIVE (add the column, then the constraint NOT VALID or with an index built CONCURRENTLY)", name, constraintWord(con.GetContype()))
			return
		}
	}
	c.add(Direct, "ADD COLUMN %s with a constant or NULL default is a catalog change (no rewrite)", name)
}

func (c *classifier) addConstraint(con *pg_query.Constraint) {
	name := con.GetConname()
	switch con.GetContype() {
	case pg_query.ConstrType_CONSTR_CHECK, pg_query.ConstrType_CONSTR_FOREIGN:
		if con.GetSkipValidation() {
			c.add(Direct, "ADD CONSTRAINT %s NOT VALID checks only new rows; VALIDATE CONSTRAINT later scans without blocking writes", name)
		} else {
			c.add(Shadow, "ADD CONSTRAINT %s validates every row while holding its lock (add it NOT VALID, then VALIDATE CONSTRAINT: both direct)", name)
		}
	case pg_query.ConstrType_CONSTR_UNIQUE:
		if con.GetIndexname() != "" {
			c.add(Direct, "ADD CONSTRAINT %s UNIQUE USING INDEX %s adopts an existing index", name, con.GetIndexname())
		} else {
			c.add(Shadow, "ADD CONSTRAINT %s UNIQUE builds its index under ACCESS EXCLUSIVE (build it with CREATE UNIQUE INDEX CONCURRENTLY, then ADD CONSTRAINT ... USING INDEX)", name)
		}
	case pg_query.ConstrType_CONSTR_PRIMARY:
		// Even USING INDEX, a primary key sets NOT NULL on its columns,
		// which scans the table unless a CHECK proves it: the index's
		// columns are not in the statement, so nothing is proven.
		c.add(Shadow, "ADD PRIMARY KEY %s builds an index or sets NOT NULL under ACCESS EXCLUSIVE", name)
	default:
		c.add(Shadow, "ADD CONSTRAINT %s (%s) builds or checks it under ACCESS EXCLUSIVE", name, constraintWord(con.GetContype()))
	}
}

// alterType is direct only for the changes known to be binary-coercible
// without a rewrite or an index rebuild, given the column's current type.
func (c *classifier) alterType(col string, def *pg_query.ColumnDef) {
	if def.GetRawDefault() != nil || def.GetCollClause() != nil {
		c.add(Shadow, "ALTER COLUMN %s TYPE with USING or COLLATE rewrites the table", col)
		return
	}
	to := def.GetTypeName()
	old := ""
	if c.facts != nil {
		old = c.facts.ColumnTypes[col]
	}
	if why, ok := noRewrite(old, typeName(to), typmods(to)); ok {
		c.add(Direct, "ALTER COLUMN %s TYPE: %s", col, why)
		return
	}
	c.add(Shadow, "ALTER COLUMN %s TYPE %s rewrites the table under ACCESS EXCLUSIVE (not proven binary-coercible from %q)", col, typeName(to), old)
}

// noRewrite recognises the type changes Postgres makes without a rewrite:
// widening or removing a varchar's length, varchar to text, and raising a
// numeric's precision at the same scale (or removing it).
func noRewrite(old, to string, mods []int64) (string, bool) {
	oldName, oldMods := parseFormatted(old)
	switch {
	case oldName == "character varying" && to == "text":
		return "varchar to text is binary-coercible", true
	case oldName == "character varying" && to == "varchar" && len(mods) == 0:
		return "removing a varchar's length checks nothing", true
	case oldName == "character varying" && to == "varchar" && len(oldMods) == 1 && len(mods) == 1 && mods[0] >= oldMods[0]:
		return fmt.Sprintf("widening varchar(%d) to varchar(%d) checks nothing", oldMods[0], mods[0]), true
	case oldName == "numeric" && to == "numeric" && len(mods) == 0:
		return "removing a numeric's precision checks nothing", true
	case oldName == "numeric" && to == "numeric" && len(oldMods) == 2 && len(mods) == 2 && mods[1] == oldMods[1] && mods[0] >= oldMods[0]:
		return fmt.Sprintf("raising numeric(%d,%d) to numeric(%d,%d) checks nothing", oldMods[0], oldMods[1], mods[0], mods[1]), true
	}
	return "", false
}

func (c *classifier) rename(s *pg_query.RenameStmt) {
	onTable := s.RenameType == pg_query.ObjectType_OBJECT_TABLE || s.RenameType == pg_query.ObjectType_OBJECT_TABCONSTRAINT ||
		(s.RenameType == pg_query.ObjectType_OBJECT_COLUMN && s.RelationType == pg_query.ObjectType_OBJECT_TABLE)
	if s.Relation == nil || !onTable {
		c.add(Refused, "only renames of a table, its columns or its constraints are handled, not of %s", objectWord(s.RenameType))
		return
	}
	c.table(s.Relation)
	c.out.Execution = InTransaction
	switch s.RenameType {
	case pg_query.ObjectType_OBJECT_TABLE:
		c.add(Direct, "RENAME TO %s changes only the catalog", s.Newname)
	case pg_query.ObjectType_OBJECT_COLUMN:
		c.add(Direct, "RENAME COLUMN %s TO %s changes only the catalog", s.Subname, s.Newname)
	case pg_query.ObjectType_OBJECT_TABCONSTRAINT:
		c.add(Direct, "RENAME CONSTRAINT %s TO %s changes only the catalog", s.Subname, s.Newname)
	}
}

func (c *classifier) createIndex(s *pg_query.IndexStmt) {
	c.table(s.Relation)
	c.out.Index, c.out.IndexSchema = s.Idxname, s.Relation.GetSchemaname()
	switch {
	case !s.Concurrent:
		c.add(Shadow, "plain CREATE INDEX blocks writes for the whole build: write CREATE INDEX CONCURRENTLY, which takes the direct path")
	case s.Idxname == "":
		c.add(Refused, "CREATE INDEX CONCURRENTLY needs an index name, so that a retry finds the index an earlier attempt built")
	default:
		c.out.Execution = CreateIndexConcurrently
		c.add(Direct, "CREATE INDEX CONCURRENTLY %s builds without blocking writes (an INVALID index a failed build leaves is dropped before the retry)", s.Idxname)
	}
}

func (c *classifier) dropIndex(s *pg_query.DropStmt) {
	if s.RemoveType != pg_query.ObjectType_OBJECT_INDEX {
		c.add(Refused, "DROP %s is not a schema change of one table: run it through the router", objectWord(s.RemoveType))
		return
	}
	if len(s.Objects) != 1 {
		c.add(Refused, "DROP INDEX of %d indexes: OnlineDDL drops one at a time", len(s.Objects))
		return
	}
	var parts []string
	for _, p := range s.Objects[0].GetList().GetItems() {
		parts = append(parts, p.GetString_().GetSval())
	}
	c.out.Index = parts[len(parts)-1]
	if len(parts) > 1 {
		c.out.IndexSchema = parts[len(parts)-2]
	}
	if s.Concurrent {
		c.out.Execution = DropIndexConcurrently
		c.add(Direct, "DROP INDEX CONCURRENTLY %s does not block writes", c.out.Index)
	} else {
		c.out.Execution = InTransaction
		c.add(Direct, "DROP INDEX %s changes only the catalog, under a brief ACCESS EXCLUSIVE lock bounded by lock_timeout", c.out.Index)
	}
}

// nonVolatile reports whether a default expression is provably not
// volatile (a constant, a cast of one, now()-like values), so that
// Postgres stores it once instead of rewriting every row; else it says
// what it could not prove.
func nonVolatile(n *pg_query.Node) (string, bool) {
	switch x := n.GetNode().(type) {
	case *pg_query.Node_AConst:
		return "", true
	case *pg_query.Node_TypeCast:
		return nonVolatile(x.TypeCast.Arg)
	case *pg_query.Node_SqlvalueFunction:
		// CURRENT_TIMESTAMP, CURRENT_DATE, CURRENT_USER...: stable.
		return "", true
	case *pg_query.Node_AExpr:
		// A unary minus on a constant.
		if x.AExpr.Lexpr == nil && x.AExpr.Kind == pg_query.A_Expr_Kind_AEXPR_OP {
			return nonVolatile(x.AExpr.Rexpr)
		}
	case *pg_query.Node_AArrayExpr:
		for _, e := range x.AArrayExpr.Elements {
			if why, ok := nonVolatile(e); !ok {
				return why, false
			}
		}
		return "", true
	case *pg_query.Node_FuncCall:
		name := funcName(x.FuncCall)
		if stableFuncs[name] && len(x.FuncCall.Args) == 0 {
			return "", true
		}
		return name + "()", false
	}
	return "(an expression)", false
}

// stableFuncs are argument-less functions known not to be volatile.
var stableFuncs = map[string]bool{"now": true, "transaction_timestamp": true, "current_database": true}

func funcName(f *pg_query.FuncCall) string {
	names := f.GetFuncname()
	if len(names) == 0 {
		return ""
	}
	return names[len(names)-1].GetString_().GetSval()
}

// typeName is a type's name without pg_catalog, as the parser spells it
// (int becomes int4, varchar stays varchar).
func typeName(t *pg_query.TypeName) string {
	names := t.GetNames()
	if len(names) == 0 {
		return ""
	}
	var parts []string
	for _, n := range names {
		if s := n.GetString_().GetSval(); s != "pg_catalog" {
			parts = append(parts, s)
		}
	}
	s := strings.Join(parts, ".")
	if len(t.GetArrayBounds()) > 0 {
		s += "[]"
	}
	return s
}

func typmods(t *pg_query.TypeName) []int64 {
	var mods []int64
	for _, m := range t.GetTypmods() {
		mods = append(mods, int64(m.GetAConst().GetIval().GetIval()))
	}
	return mods
}

// parseFormatted splits format_type()'s "numeric(10,2)" into "numeric"
// and [10 2].
func parseFormatted(s string) (string, []int64) {
	name, args, ok := strings.Cut(s, "(")
	if !ok {
		return s, nil
	}
	var mods []int64
	for _, a := range strings.Split(strings.TrimSuffix(args, ")"), ",") {
		var v int64
		if _, err := fmt.Sscanf(strings.TrimSpace(a), "%d", &v); err != nil {
			return s, nil
		}
		mods = append(mods, v)
	}
	return name, mods
}

// builtinTypes are base types without constraints of their own: a column
// of one added with a non-volatile default is a catalog change. (A domain
// with constraints forces a rewrite; user types are not known here.)
var builtinTypes = map[string]bool{}

// serialTypes fill a new column from a sequence.
var serialTypes = map[string]bool{"serial": true, "bigserial": true, "smallserial": true, "serial4": true, "serial8": true, "serial2": true}

func init() {
	for _, t := range strings.Fields(`bool int2 int4 int8 float4 float8 numeric text varchar bpchar char
		date time timetz timestamp timestamptz interval uuid json jsonb bytea inet cidr macaddr
		money bit varbit xml tsvector oid name`) {
		builtinTypes[t] = true
		builtinTypes[t+"[]"] = true
	}
}

func objectWord(t pg_query.ObjectType) string {
	return strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(t.String(), "OBJECT_"), "_", " "))
}

func cmdWord(t pg_query.AlterTableType) string {
	return strings.TrimPrefix(t.String(), "AT_")
}

func constraintWord(t pg_query.ConstrType) string {
	return strings.ToLower(strings.TrimPrefix(t.String(), "CONSTR_"))
}
