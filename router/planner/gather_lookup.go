package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// Batched lookups in a gather (issue #16): a table sharded by a key that
// the statement equates with a column of another table it reads
// (`orders o JOIN customers c ON c.id = o.customer_id`, customers sharded
// by id) need not be pulled whole. The other table (the source) is pulled
// first; the router reads the column's values from its rows as they pass,
// and pulls the sharded table only from the shards that own those values,
// each with `key = ANY('{its values}')` added to its pull: one statement
// per shard, the values sent as one array.
//
// Why the answer is unchanged: the computing Postgres runs the whole
// statement again, so a pull may hold more rows than needed, never fewer.
// The lookup drops only rows whose key equals no value of the source's
// pulled rows (a superset of the source rows the statement can use: the
// source's pull keeps at most the filters that statement applies). Such a
// row can take part in no output row when the equality is a conjunct:
//   - of the top-level WHERE, the table read in the top-level FROM: every
//     row the WHERE keeps has key = col, col a source value (a row where
//     an outer join put NULLs fails it too);
//   - of the ON of an inner join, or of an outer join whose nullable side
//     holds the table: a row of it that matches nothing adds no row there
//     (the preserved side's rows are kept either way), and the rows of
//     the join are those of the rows that match.
//
// The table must be read once in the statement (its temporary table
// serves that reference alone); the equality must compare bare columns
// of types whose equality is equality of their routing encodings:
// integers with integers (a value outside the key column's type matches
// no row and is dropped), text or varchar with text or varchar under
// deterministic collations. Too many values (maxLookupKeys, or
// maxLookupBytes of them) and the router pulls the table whole, as
// without a lookup.

// GatherLookup restricts a gathered table's pull to the keys another
// gathered table's rows hold.
type GatherLookup struct {
	// From is the source table's temporary table name (GatherTable.Temp);
	// it is loaded first.
	From string
	// FromColumn is the source column's position in the source's pull.
	FromColumn int
	// FromType is the source column's type, as its binary COPY values
	// are read.
	FromType shardfunc.ColumnType
	// Key is the looked-up table's shard-key column, and KeyType its
	// type: the array's element type.
	Key     string
	KeyType shardfunc.ColumnType
	// Index and Group route each value to its shard.
	Index *topo.ShardIndex
	Group *topo.ShardGroup
	// Pull is the table's pull with `key = ANY($1::type[])` added to
	// its filters, the last $1 of its text standing for the array
	// literal of one shard's values.
	Pull string
}

// Bounds on a lookup's values; past them the table is pulled whole.
const (
	MaxLookupKeys  = 10000
	MaxLookupBytes = 1 << 20
)

// lookupEquality is one conjunct `a.x = b.y` of a join condition or the
// WHERE, its columns placed on their references.
type lookupEquality struct {
	left, right       *tableRef
	leftCol, rightCol string
}

// lookupEqualities finds the equalities of bare columns a batched lookup
// may use: conjuncts of the top-level WHERE over references of the
// top-level FROM, and conjuncts of the ON of joins, for each join the
// references that must not hold the looked-up table (its preserved side
// for an outer join).
func lookupEqualities(sel *pg_query.SelectStmt, occ []gatherOccurrence, columns map[TableName][]string) (eqs []lookupEquality, preserved [][]*tableRef) {
	if sel.Op != pg_query.SetOperation_SETOP_NONE {
		return nil, nil
	}
	byRV := map[*pg_query.RangeVar]*tableRef{}
	for _, o := range occ {
		byRV[o.ref.rv] = o.ref
	}
	add := func(quals *pg_query.Node, refs []*tableRef, plain bool, keep []*tableRef) {
		for _, conj := range conjuncts(quals, nil) {
			e := conj.GetAExpr()
			if e == nil || e.Kind != pg_query.A_Expr_Kind_AEXPR_OP || !isEquals(e.Name) {
				continue
			}
			lc, rc := e.Lexpr.GetColumnRef(), e.Rexpr.GetColumnRef()
			if lc == nil || rc == nil {
				continue
			}
			l, r := placeColumn(lc, refs, plain, columns), placeColumn(rc, refs, plain, columns)
			if l == nil || r == nil || l == r {
				continue
			}
			eqs = append(eqs, lookupEquality{left: l, right: r, leftCol: lastName(lc), rightCol: lastName(rc)})
			preserved = append(preserved, keep)
		}
	}
	top, plain := topFromTables(sel.FromClause, byRV)
	if sel.WhereClause != nil {
		add(sel.WhereClause, top, plain, nil)
	}
	var visit func(n *pg_query.Node)
	visit = func(n *pg_query.Node) {
		j := n.GetJoinExpr()
		if j == nil {
			return
		}
		visit(j.Larg)
		visit(j.Rarg)
		if j.Quals == nil || j.IsNatural {
			return
		}
		refs, plainHere := topFromTables([]*pg_query.Node{n}, byRV)
		var keep []*tableRef
		switch j.Jointype {
		case pg_query.JoinType_JOIN_INNER:
		case pg_query.JoinType_JOIN_LEFT:
			keep, _ = topFromTables([]*pg_query.Node{j.Larg}, byRV)
		case pg_query.JoinType_JOIN_RIGHT:
			keep, _ = topFromTables([]*pg_query.Node{j.Rarg}, byRV)
		default:
			return // FULL: both sides are preserved
		}
		add(j.Quals, refs, plainHere, keep)
	}
	for _, n := range sel.FromClause {
		visit(n)
	}
	return eqs, preserved
}

func lastName(cr *pg_query.ColumnRef) string {
	return cr.Fields[len(cr.Fields)-1].GetString_().GetSval()
}

// planLookups gives the tables of g that a batched lookup may restrict
// their lookup, from the equalities of sel. pulled are each table's
// pulled columns and filters its pushed filters.
func (c *planCtx) planLookups(sel *pg_query.SelectStmt, occ []gatherOccurrence, columns map[TableName][]string, g *GatherPlan, pulled [][]string, filters map[*tableRef][]*pg_query.Node) {
	eqs, preserved := lookupEqualities(sel, occ, columns)
	if len(eqs) == 0 {
		return
	}
	count := map[TableName]int{}
	tableOf := map[*tableRef]int{}
	for _, o := range occ {
		count[o.ref.name]++
		tableOf[o.ref] = o.table
	}
	sources := map[int]bool{} // tables some lookup reads from: never looked up themselves
	for i, e := range eqs {
		for _, side := range [2][2]*tableRef{{e.left, e.right}, {e.right, e.left}} {
			target, source := side[0], side[1]
			targetCol, sourceCol := e.leftCol, e.rightCol
			if target == e.right {
				targetCol, sourceCol = e.rightCol, e.leftCol
			}
			ti, si := tableOf[target], tableOf[source]
			t := &g.Tables[ti]
			if t.Lookup != nil || sources[ti] || g.Tables[si].Lookup != nil || ti == si || count[target.name] != 1 {
				continue
			}
			if refIn(preserved[i], target) {
				continue
			}
			lk, ok := c.lookupFor(target, targetCol, pulled[ti], source, sourceCol, pulled[si], filters[target])
			if !ok {
				continue
			}
			lk.From = g.Tables[si].Temp
			t.Lookup = lk
			sources[si] = true
			break
		}
	}
}

func refIn(list []*tableRef, r *tableRef) bool {
	for _, x := range list {
		if x == r {
			return true
		}
	}
	return false
}

// lookupFor plans the lookup of target's rows by its shard key
// targetCol from source's column sourceCol, if their types allow it.
func (c *planCtx) lookupFor(target *tableRef, targetCol string, targetPulled []string, source *tableRef, sourceCol string, sourcePulled []string, pushed []*pg_query.Node) (*GatherLookup, bool) {
	place := target.place
	if place == nil || place.IsReference() || place.Group == nil || place.Index == nil || place.ShardColumn() != targetCol {
		return nil, false
	}
	pos := -1
	for i, col := range sourcePulled {
		if col == sourceCol {
			pos = i
		}
	}
	if pos < 0 {
		return nil, false
	}
	kt, err := c.columnType(target.name, targetCol)
	if err != nil {
		return nil, false
	}
	st, err := c.columnType(source.name, sourceCol)
	if err != nil {
		return nil, false
	}
	switch {
	case kt.IsInteger() && st.IsInteger():
	case isTextual(kt) && isTextual(st):
		for _, side := range []struct {
			r   *tableRef
			col string
			t   shardfunc.ColumnType
		}{{target, targetCol, kt}, {source, sourceCol, st}} {
			coll, ok := c.textCollation(side.r, side.col, side.t)
			if !ok || coll.Nondeterministic {
				return nil, false
			}
		}
	default:
		return nil, false
	}
	qual := target.rv.Relname
	if a := target.rv.GetAlias(); a != nil {
		qual = a.Aliasname
	}
	elem := "pg_catalog.text"
	if kt.IsInteger() {
		elem = "pg_catalog." + kt.String()
	}
	tree, err := pg_query.Parse("SELECT 1 WHERE " + quoteIdentifier(qual) + "." + quoteIdentifier(targetCol) + " = ANY ($1::" + elem + "[])")
	if err != nil {
		return nil, false
	}
	cond := tree.Stmts[0].Stmt.GetSelectStmt().WhereClause
	filters := append(append([]*pg_query.Node(nil), pushed...), cond)
	pull, err := c.pullSQL(target.name, target.rv, targetPulled, filters)
	if err != nil {
		return nil, false
	}
	return &GatherLookup{FromColumn: pos, FromType: st, Key: targetCol, KeyType: kt, Index: place.Index, Group: place.Group, Pull: pull}, true
}

func isTextual(t shardfunc.ColumnType) bool {
	return t == shardfunc.Text || t == shardfunc.Varchar
}
