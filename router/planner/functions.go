package planner

import (
	"encoding/json"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"

	"github.com/tesseradb/tessera/topo"
)

// A user's function runs on the shard its statement goes to, and reads
// that shard's rows only: `SELECT n_customers()` (a SQL function counting
// a sharded table) goes to the authoritative shard, which holds none of
// the table's rows. The planner therefore refuses a statement calling a
// function whose body reads (directly or through the functions it calls)
// a table with rows on any shard but the one the statement runs on. It
// reads the bodies of SQL and PL/pgSQL functions; a body it cannot read
// (a dynamic EXECUTE, another procedural language) may read anything, and
// is refused wherever it is reached on a topology of several shards. A DO
// block is read the same way (checkDo).

// Functions is a snapshot of one database's functions written in SQL or
// PL/pgSQL (outside pg_catalog, information_schema and extensions), and
// what each reads, as the router read their bodies.
type Functions struct {
	byName map[string][]*function // lower-case name
	// triggers: (schema, table) -> (schema, name) of each trigger's
	// function.
	triggers map[[2]string][][2]string
}

type function struct {
	schema string
	// tables are the relations its body names, as (schema or "", name):
	// an unqualified one resolves by the caller's search path.
	tables [][2]string
	calls  []string // lower-case names of the functions it calls
	// opaque: the body names tables the router cannot see (dynamic SQL,
	// another language).
	opaque bool
}

// FunctionBody is one function as the catalog gives it: SQL is the text
// of its body's statements (each parsed on its own). Opaque marks a body
// whose statements are not all in SQL: a dynamic EXECUTE, or a language
// other than SQL and PL/pgSQL.
type FunctionBody struct {
	Schema, Name string
	SQL          []string
	Opaque       bool
}

// Trigger is a trigger's table and function.
type Trigger struct {
	TableSchema, Table, FuncSchema, Func string
}

// NewFunctions builds a snapshot from the functions' bodies and the
// triggers; a body that does not parse names nothing.
func NewFunctions(bodies []FunctionBody, triggers []Trigger) *Functions {
	fs := &Functions{byName: map[string][]*function{}, triggers: map[[2]string][][2]string{}}
	for _, tg := range triggers {
		k := [2]string{tg.TableSchema, tg.Table}
		fs.triggers[k] = append(fs.triggers[k], [2]string{strings.ToLower(tg.FuncSchema), strings.ToLower(tg.Func)})
	}
	for _, b := range bodies {
		fn := &function{schema: strings.ToLower(b.Schema), opaque: b.Opaque}
		for _, sql := range b.SQL {
			fn.read(sql)
		}
		name := strings.ToLower(b.Name)
		fs.byName[name] = append(fs.byName[name], fn)
	}
	return fs
}

// read adds the relations and calls of one statement or expression.
func (fn *function) read(sql string) {
	tree, err := pg_query.Parse(sql)
	if err != nil {
		if tree, err = pg_query.Parse("SELECT " + sql); err != nil {
			return
		}
	}
	// WITH names hide tables of those names (as in resolveTables).
	ctes := map[string]bool{}
	for _, raw := range tree.Stmts {
		walk(raw.Stmt.ProtoReflect(), func(m proto.Message) bool {
			if x, ok := m.(*pg_query.CommonTableExpr); ok {
				ctes[x.Ctename] = true
			}
			return true
		})
	}
	for _, raw := range tree.Stmts {
		walk(raw.Stmt.ProtoReflect(), func(m proto.Message) bool {
			switch x := m.(type) {
			case *pg_query.RangeVar:
				if x.Schemaname != "" || !ctes[x.Relname] {
					fn.tables = append(fn.tables, [2]string{x.Schemaname, x.Relname})
				}
			case *pg_query.FuncCall:
				fn.calls = append(fn.calls, funcName(x))
			}
			return true
		})
	}
}

// checkFunctions refuses st if a function the statement calls reads a
// table whose rows live on a shard the statement does not run on.
func (c *planCtx) checkFunctions(st *Statement, f *facts) {
	if !f.opaqueCall || st.Err != nil || len(f.calls) == 0 || len(c.top.Shards()) == 1 {
		return
	}
	fs, err := c.functions()
	if err != nil {
		st.Err = err
		return
	}
	runsOn := st.Targets
	if st.Route == Gathered {
		runsOn = []string{c.top.AuthoritativeShard()}
	}
	held := func(p *topo.Placement) bool { return heldWithin(p, runsOn) }
	seen := map[string]bool{}
	for _, fc := range f.calls {
		schema := ""
		if n := len(fc.Funcname); n > 1 {
			schema = strings.ToLower(fc.Funcname[n-2].GetString_().GetSval())
		}
		if fn, table := c.readsElsewhere(fs, funcName(fc), schema, held, seen); fn != "" {
			st.Err = unsupported("a function that reads tables on other shards is not supported yet: %s reads %s", fn, table)
			return
		}
	}
}

// checkTriggers refuses a write to target if a trigger on it runs a
// function that reads or writes a table not placed with target: the
// trigger runs on the target row's shard, and would write (an audit row,
// a counter) into that shard's copy of a table whose rows live
// elsewhere, or read a part of one.
func (c *planCtx) checkTriggers(st *Statement, target *tableRef) {
	if st.Err != nil || target == nil || target.catalog || len(c.top.Shards()) == 1 {
		return
	}
	fs, err := c.functions()
	if err != nil {
		st.Err = err
		return
	}
	placed := func(p *topo.Placement) bool { return placedWith(p, target.place) }
	seen := map[string]bool{}
	for _, tf := range fs.triggers[[2]string{target.name.Schema, target.name.Table}] {
		if fn, table := c.readsElsewhere(fs, tf[1], tf[0], placed, seen); fn != "" {
			st.Err = unsupported("a write to %s.%s, whose trigger function %s reads or writes %s on other shards, is not supported yet",
				target.name.Schema, target.name.Table, fn, table)
			return
		}
	}
}

// functions is the database's functions snapshot.
func (c *planCtx) functions() (*Functions, error) {
	fs, err := c.schema.Functions(c.in.Database)
	if err != nil {
		c.noCache = true
	}
	return fs, err
}

// readsElsewhere follows the functions of a name (in schema, or any)
// and those they call, and returns the first function and table it reads
// whose placement ok refuses, or "".
func (c *planCtx) readsElsewhere(fs *Functions, name, schema string, ok func(*topo.Placement) bool, seen map[string]bool) (string, string) {
	for _, fn := range fs.byName[name] {
		if schema != "" && fn.schema != schema || seen[fn.schema+"."+name] {
			continue
		}
		seen[fn.schema+"."+name] = true
		if t := c.bodyReadsElsewhere(fs, fn, ok, seen); t != "" {
			return fn.schema + "." + name, t
		}
	}
	return "", ""
}

// bodyReadsElsewhere returns the first table fn's body (or a function it
// calls) reads whose placement ok refuses, or "".
func (c *planCtx) bodyReadsElsewhere(fs *Functions, fn *function, ok func(*topo.Placement) bool, seen map[string]bool) string {
	if fn.opaque {
		return "tables named only when it runs (dynamic SQL or a language other than SQL and PL/pgSQL)"
	}
	for _, t := range fn.tables {
		if t[0] == "pg_catalog" || t[0] == "information_schema" || t[0] == "" && strings.HasPrefix(t[1], "pg_") {
			continue
		}
		s := t[0]
		if s == "" {
			s = c.searchSchema(t[1])
		}
		if !ok(c.top.Resolve(c.in.Database, s, t[1])) {
			return s + "." + t[1]
		}
	}
	for _, call := range fn.calls {
		if f, t := c.readsElsewhere(fs, call, "", ok, seen); f != "" {
			return t + " (through " + f + ")"
		}
	}
	return ""
}

// checkDo refuses a DO block that reads or writes a table whose rows are
// not all on the shard it runs on (the authoritative one), or whose body
// the router cannot read: it would see or change only that shard's part.
func (c *planCtx) checkDo(st *Statement, do *pg_query.DoStmt) {
	if st.Err != nil || len(c.top.Shards()) == 1 {
		return
	}
	body, lang := "", "plpgsql"
	for _, a := range do.Args {
		de := a.GetDefElem()
		switch de.GetDefname() {
		case "as":
			body = de.Arg.GetString_().GetSval()
		case "language":
			lang = strings.ToLower(de.Arg.GetString_().GetSval())
		}
	}
	const tag = "$tessera_do$"
	if lang != "plpgsql" || strings.Contains(body, tag) {
		st.Err = unsupported("a DO block in language %s is not supported yet: the router cannot see which tables it reads", lang)
		return
	}
	stmts, opaque := PLpgSQLStatements("CREATE FUNCTION tessera_do() RETURNS void LANGUAGE plpgsql AS " + tag + body + tag)
	fn := &function{opaque: opaque}
	for _, sql := range stmts {
		fn.read(sql)
	}
	fs, err := c.functions()
	if err != nil {
		st.Err = err
		return
	}
	held := func(p *topo.Placement) bool { return heldWithin(p, st.Targets) }
	if t := c.bodyReadsElsewhere(fs, fn, held, map[string]bool{}); t != "" {
		st.Err = unsupported("a DO block that reads or writes tables on other shards is not supported yet: it reads %s", t)
	}
}

// heldWithin reports whether every shard of runsOn holds all the rows of
// a table placed by p: a copy of a reference table, or the one shard of a
// single-shard group that is all of runsOn.
func heldWithin(p *topo.Placement, runsOn []string) bool {
	if p == nil || len(runsOn) == 0 {
		return false
	}
	if p.IsReference() {
		for _, s := range runsOn {
			held := false
			for _, g := range p.ReferenceGroups {
				held = held || contains(g.Shards(), s)
			}
			if !held {
				return false
			}
		}
		return true
	}
	shards := p.Group.Shards()
	return len(shards) == 1 && len(runsOn) == 1 && shards[0] == runsOn[0]
}

// PLpgSQLStatements returns the SQL statements and expressions of a
// PL/pgSQL function's body, given its CREATE FUNCTION text
// (pg_get_functiondef): what the body names is in them. opaque says that
// they are not all it runs: a dynamic EXECUTE (its text is a value the
// parser cannot see), or a body that does not parse.
func PLpgSQLStatements(def string) (stmts []string, opaque bool) {
	js, err := pg_query.ParsePlPgSqlToJSON(def)
	if err != nil {
		return nil, true
	}
	var tree any
	if err := json.Unmarshal([]byte(js), &tree); err != nil {
		return nil, true
	}
	var visit func(any)
	visit = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				switch {
				case dynamicPLpgSQL[k]:
					// EXECUTE 'a constant': read as the statement it is.
					if sql, ok := constantDynamic(e); ok {
						stmts = append(stmts, sql)
					} else {
						opaque = true
					}
					visit(e)
				case k == "query":
					if s, ok := e.(string); ok {
						stmts = append(stmts, s)
					} else {
						visit(e)
					}
				default:
					visit(e)
				}
			}
		case []any:
			for _, e := range x {
				visit(e)
			}
		}
	}
	visit(tree)
	return stmts, opaque
}

// constantDynamic returns the SQL of a dynamic statement whose text is a
// string constant (EXECUTE 'CREATE TABLE t (x int)'): the first
// expression under node, when it is one.
func constantDynamic(node any) (string, bool) {
	expr, ok := firstQuery(node)
	if !ok {
		return "", false
	}
	tree, err := pg_query.Parse("SELECT " + expr)
	if err != nil || len(tree.Stmts) != 1 {
		return "", false
	}
	targets := tree.Stmts[0].Stmt.GetSelectStmt().GetTargetList()
	if len(targets) != 1 {
		return "", false
	}
	c := targets[0].GetResTarget().GetVal().GetAConst()
	if c == nil || c.GetSval() == nil {
		return "", false
	}
	return c.GetSval().GetSval(), true
}

// firstQuery finds the first expression text ("query") under node.
func firstQuery(node any) (string, bool) {
	switch x := node.(type) {
	case map[string]any:
		if q, ok := x["query"].(string); ok {
			return q, true
		}
		for _, k := range []string{"query", "PLpgSQL_expr"} {
			if v, ok := x[k]; ok {
				if q, ok := firstQuery(v); ok {
					return q, true
				}
			}
		}
	case []any:
		for _, e := range x {
			if q, ok := firstQuery(e); ok {
				return q, true
			}
		}
	}
	return "", false
}

// dynamicPLpgSQL are the keys of the PL/pgSQL parse tree that run a
// statement built at run time: EXECUTE, FOR ... IN EXECUTE, and RETURN
// QUERY EXECUTE or OPEN ... FOR EXECUTE (their "dynquery").
var dynamicPLpgSQL = map[string]bool{
	"PLpgSQL_stmt_dynexecute": true,
	"PLpgSQL_stmt_dynfors":    true,
	"dynquery":                true,
}
