package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
	"slices"
)

// keyPredicate is a conjunct of a WHERE clause that confines a table's rows
// to the shards of some shard-key values: col = v, v = col, col IN (v, ...).
type keyPredicate struct {
	keys      []Key
	alternate bool // routes by an alternate index
}

// better prefers the table's own index (every write and read agrees on
// it), then fewer values (fewer shards).
func (p *keyPredicate) better(than *keyPredicate) bool {
	if than == nil {
		return true
	}
	if p.alternate != than.alternate {
		return !p.alternate
	}
	return len(p.keys) < len(than.keys)
}

// keyOf reads a conjunct col = v, v = col or col IN (v, ...) as a key
// predicate, if lookup resolves col to a shard-key (or alternate) column
// of a table and every v is a routable value. Any conjunct will do: a row
// that satisfies the conjunction satisfies each conjunct.
func (c *planCtx) keyOf(ax *pg_query.A_Expr, lookup func(*pg_query.ColumnRef) (*tableRef, string, *topo.ShardIndex)) (*keyPredicate, *tableRef, error) {
	var col *pg_query.ColumnRef
	var values []*pg_query.Node
	switch ax.Kind {
	case pg_query.A_Expr_Kind_AEXPR_OP:
		if col = ax.Lexpr.GetColumnRef(); col != nil {
			values = []*pg_query.Node{ax.Rexpr}
		} else if col = ax.Rexpr.GetColumnRef(); col != nil {
			values = []*pg_query.Node{ax.Lexpr}
		}
	case pg_query.A_Expr_Kind_AEXPR_IN:
		col, values = ax.Lexpr.GetColumnRef(), ax.Rexpr.GetList().GetItems()
	}
	if col == nil || len(values) == 0 {
		return nil, nil, nil
	}
	ref, column, ix := lookup(col)
	if ref == nil {
		return nil, nil, nil
	}
	typ, err := c.columnType(ref.name, column)
	if err != nil {
		return nil, nil, err
	}
	p := &keyPredicate{alternate: ix != ref.place.Index}
	for _, v := range values {
		k, ok := c.valueKey(v, typ, ix, column)
		if !ok {
			return nil, nil, nil
		}
		k.widens = v.GetTypeCast() == nil && k.Class == IntegerLiteral && typ.IsInteger()
		p.keys = append(p.keys, k)
	}
	return p, ref, nil
}

// conjuncts flattens the AND tree of a WHERE clause.
func conjuncts(n *pg_query.Node, out []*pg_query.Node) []*pg_query.Node {
	if n == nil {
		return out
	}
	if b := n.GetBoolExpr(); b != nil && b.Boolop == pg_query.BoolExprType_AND_EXPR {
		for _, a := range b.Args {
			out = conjuncts(a, out)
		}
		return out
	}
	return append(out, n)
}

// isEquals reports the operator = written without a schema.
func isEquals(name []*pg_query.Node) bool {
	return len(name) == 1 && name[0].GetString_().GetSval() == "="
}

// columnIndex finds which of tables a column reference names a shard-key
// column of, and the index that routes by it: the placement's, or an
// alternate. An unqualified column is taken for the first table with a
// shard key of that name (if two tables have it, Postgres refuses it as
// ambiguous).
func columnIndex(cr *pg_query.ColumnRef, tables []*tableRef) (*tableRef, string, *topo.ShardIndex) {
	var parts []string
	for _, f := range cr.Fields {
		s := f.GetString_()
		if s == nil {
			return nil, "", nil // A_Star
		}
		parts = append(parts, s.Sval)
	}
	column := parts[len(parts)-1]
	for _, r := range tables {
		if !qualifies(parts[:len(parts)-1], r) {
			continue
		}
		if r.place.ShardColumn() == column {
			return r, column, r.place.Index
		}
		if alt := r.place.Alternate(column); alt != nil {
			return r, column, alt
		}
	}
	return nil, "", nil
}

// qualifies reports whether a column qualifier (none, table or alias,
// schema.table, db.schema.table) names r. An aliased table is known by
// its alias only.
func qualifies(q []string, r *tableRef) bool {
	if len(q) > 1 && r.rv.GetAlias() != nil {
		return false
	}
	switch len(q) {
	case 0:
		return true
	case 1:
		return q[0] == r.qualifier()
	case 2:
		return q[0] == r.name.Schema && q[1] == r.rv.Relname
	case 3:
		return q[0] == r.name.Database && q[1] == r.name.Schema && q[2] == r.rv.Relname
	}
	return false
}

// valueKey turns a value compared with (or inserted into) a shard-key
// column of type colType into a Key, if it is a literal or a parameter,
// possibly cast, whose routing the planner can trust:
//
//   - a cast must be to a built-in type of the column's family (integers
//     route alike; text, varchar and name too) and carry no modifier
//     (varchar(3) would truncate the value first);
//   - an integer literal keys integer and numeric columns, another number
//     numeric ones, a standard or dollar-quoted string any column (it is
//     the column type's text input); other strings (E'..', B'..', ...)
//     are not keys;
//   - a parameter routes as the type Parse gave it, else the cast's, else
//     the column's, which is what Postgres infers.
func (c *planCtx) valueKey(v *pg_query.Node, colType shardfunc.ColumnType, ix *topo.ShardIndex, column string) (Key, bool) {
	typ := colType
	if tc := v.GetTypeCast(); tc != nil {
		t, ok := castType(tc.TypeName)
		if !ok || !sameFamily(t, colType) {
			return Key{}, false
		}
		typ, v = t, tc.Arg
	}
	var k Key
	switch x := v.GetNode().(type) {
	case *pg_query.Node_ParamRef:
		n := int(x.ParamRef.Number)
		if n < 1 {
			return Key{}, false // $0: Postgres refuses it at execution
		}
		if n <= len(c.in.ParamOIDs) && c.in.ParamOIDs[n-1] != 0 {
			t, ok := shardfunc.TypeForOID(c.in.ParamOIDs[n-1])
			if !ok || !sameFamily(t, typ) {
				return Key{}, false
			}
			typ = t
		}
		k.Param = n
	case *pg_query.Node_AConst:
		if x.AConst.Isnull {
			return Key{}, false
		}
		ref, ok := c.lookupConst(x.AConst.Location)
		if !ok {
			return Key{}, false
		}
		k.lit, k.Negated, k.Class = ref.index, ref.negated, c.lits[ref.index].class
		switch k.Class {
		case IntegerLiteral:
			ok = typ.IsInteger() || typ == shardfunc.Numeric
		case NumericLiteral:
			ok = typ == shardfunc.Numeric
		case StringLiteral, DollarStringLiteral:
		default:
			ok = false
		}
		if !ok {
			return Key{}, false
		}
	default:
		return Key{}, false
	}
	if ix.Func.Accepts(typ) != nil {
		return Key{}, false
	}
	k.Column, k.Index, k.Type = column, ix, typ
	return k, true
}

// castType resolves the built-in type of a cast, refusing modifiers,
// arrays and types outside pg_catalog.
func castType(tn *pg_query.TypeName) (shardfunc.ColumnType, bool) {
	if tn == nil || len(tn.Typmods) > 0 || len(tn.ArrayBounds) > 0 || tn.Setof || tn.PctType {
		return 0, false
	}
	names := tn.Names
	switch {
	case len(names) == 2 && names[0].GetString_().GetSval() == "pg_catalog":
	case len(names) != 1:
		return 0, false
	}
	t, err := shardfunc.ParseColumnType(names[len(names)-1].GetString_().GetSval())
	return t, err == nil
}

// sameFamily reports types whose values have the same canonical encoding
// and compare alike, so a value of one routes a column of the other.
func sameFamily(a, b shardfunc.ColumnType) bool {
	text := func(t shardfunc.ColumnType) bool {
		return t == shardfunc.Text || t == shardfunc.Varchar || t == shardfunc.Name
	}
	return a == b || a.IsInteger() && b.IsInteger() || text(a) && text(b)
}

// insertKeys makes an INSERT into a sharded table a Shard route with one
// key per VALUES row, plus a check per row and alternate index. Without a
// column list the values fill the table's columns in order, which the
// catalog tells.
func (c *planCtx) insertKeys(st *Statement, q *query, target *tableRef) {
	p, name := target.place, target.name
	column := p.ShardColumn()
	ins := q.insert
	sel := ins.SelectStmt.GetSelectStmt()
	cols := make([]string, len(ins.Cols))
	for i, n := range ins.Cols {
		cols[i] = n.GetResTarget().GetName()
	}
	if len(cols) == 0 && sel != nil {
		names, err := c.columnNames(name)
		if err != nil {
			st.Err = err
			return
		}
		cols = names
	}
	pos := slices.Index(cols, column)
	switch {
	case sel == nil:
		st.Err = unsupported("INSERT ... DEFAULT VALUES into sharded table %s is not supported (it sets no shard key)", name)
	case pos < 0:
		st.Err = unsupported("INSERT into sharded table %s must set its shard key column %s", name, column)
	case len(sel.ValuesLists) == 0:
		st.Err = unsupported("INSERT ... SELECT into sharded table %s is not supported yet", name)
	default:
		st.Err = checkSets(q.sets, target)
		if st.Err == nil {
			st.Err = c.checkArbiter(ins.OnConflictClause, target) // arbiter.go
		}
	}
	if st.Err != nil {
		return
	}
	// The placement key of each row comes first, then its alternate
	// checks: Shards checks them against it.
	type keyColumn struct {
		ix  *topo.ShardIndex
		col string
		at  int
		typ shardfunc.ColumnType
	}
	keyCols := []keyColumn{{ix: p.Index, col: column, at: pos}}
	for _, alt := range p.Alternates {
		if at := slices.Index(cols, alt.Column()); at >= 0 {
			keyCols = append(keyCols, keyColumn{ix: alt, col: alt.Column(), at: at})
		}
	}
	for i := range keyCols {
		typ, err := c.columnType(name, keyCols[i].col)
		if err != nil {
			st.Err = err
			return
		}
		keyCols[i].typ = typ
	}
	keys := make([]Key, 0, len(sel.ValuesLists)*len(keyCols))
	for r, row := range sel.ValuesLists {
		items := row.GetList().GetItems()
		for i, kc := range keyCols {
			k, ok := Key{}, kc.at < len(items)
			if ok {
				k, ok = c.valueKey(items[kc.at], kc.typ, kc.ix, kc.col)
			}
			if !ok {
				st.Err = unsupported("shard key column %s of %s must be a literal or a parameter in every INSERT row", kc.col, name)
				return
			}
			k.Row, k.Check = r, i > 0
			keys = append(keys, k)
		}
	}
	st.Route, st.Placement, st.Keys, st.PerRow = Shard, p, keys, true
	// Rows that reach several shards are split by shard at execution
	// (SplitInsert), unless the statement cannot be split safely.
	st.multiShard = ErrSplitInsert
	if why := splitProblem(ins); why != "" {
		st.multiShard = splitRefused(why)
	}
}
