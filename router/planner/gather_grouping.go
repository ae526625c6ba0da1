package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"

	"github.com/tesseradb/tessera/topo/shardfunc"
)

// Values that are equal without being alike: citext's 'Hello' and
// 'hello', numeric's 1.0 and 1.00, float8's 0 and -0, text under a
// nondeterministic collation. Where Postgres keeps one of several equal
// values (the group's value of a GROUP BY, DISTINCT, a set operation
// without ALL, min and max), it shows the one it read first, so the
// answer follows the order rows are stored in; a gather reads them in
// another order (each shard's after the previous one's) and could show
// another. A gather therefore requires every column such a clause
// reads to be of a type whose equal values are written alike; anything
// else keeps the refusal.

// alikeWhenEqual are the column types whose equal values are written
// alike (text and varchar under a deterministic collation; numeric only
// with a scale in its type, numeric(15,2), which holds every value at
// that scale, where an unconstrained column may hold 1.0 and 1.00: see
// numericScaleFixed). Types the planner does not know (citext, float8,
// jsonb, enums, arrays) are not. Expressions over such columns are
// deterministic functions of their bytes, so alike too.
func alikeWhenEqual(t shardfunc.ColumnType) bool {
	switch t {
	case shardfunc.Int2, shardfunc.Int4, shardfunc.Int8, shardfunc.Bool, shardfunc.Text, shardfunc.Varchar,
		shardfunc.Name, shardfunc.Bpchar, shardfunc.Bytea, shardfunc.UUID, shardfunc.Date,
		shardfunc.Timestamp, shardfunc.Timestamptz, shardfunc.Numeric:
		return true
	}
	return false
}

// keepsOneOfEqual reports a clause of sel (or of its subqueries) that
// keeps one of several equal values of a column not proven alikeWhenEqual.
func (c *planCtx) keepsOneOfEqual(sel *pg_query.SelectStmt, refs []*tableRef) bool {
	found := false
	derived := derivedOutputs(sel)
	var check func(n *pg_query.Node)
	// followed: derived names already followed (or being followed, as
	// a recursive CTE's column refers to itself): each is checked once.
	followed := map[string]bool{}
	check = func(n *pg_query.Node) {
		if n == nil || found {
			return
		}
		walk(n.ProtoReflect(), func(m proto.Message) bool {
			cr, ok := m.(*pg_query.ColumnRef)
			if !ok {
				return !found
			}
			if !c.columnAlike(cr, refs) {
				found = true
				return false
			}
			// A derived table's or CTE's output of the name: the
			// expressions that define it must be alike too.
			if name := lastField(cr); len(derived[name]) > 0 && !followed[name] {
				followed[name] = true
				for _, e := range derived[name] {
					check(e)
				}
			}
			return !found
		})
	}
	walk(sel.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.SelectStmt:
			for _, g := range x.GroupClause {
				check(groupItem(g, x.TargetList))
			}
			if len(x.DistinctClause) > 0 {
				for _, d := range x.DistinctClause {
					check(groupItem(d, x.TargetList)) // DISTINCT ON's expressions
				}
				for _, t := range x.TargetList {
					check(t.GetResTarget().GetVal())
				}
			}
			if x.Op != pg_query.SetOperation_SETOP_NONE && !x.All {
				for _, arm := range setArms(x, nil) {
					for _, t := range arm.TargetList {
						check(t.GetResTarget().GetVal())
					}
				}
			}
		case *pg_query.FuncCall:
			if len(x.Funcname) > 0 {
				switch x.Funcname[len(x.Funcname)-1].GetString_().GetSval() {
				case "min", "max":
					for _, a := range x.Args {
						check(a)
					}
				}
			}
		}
		return !found
	})
	return found
}

// derivedOutputs maps each output name of the statement's subqueries
// (derived tables, CTEs, and any other nested SELECT) to the expressions
// that define it: a set operation's columns are named by its first arm
// and defined by every arm, by position, and a derived table's or CTE's
// column aliases rename them. A column of such a name is followed to
// them (`SELECT x, count(*) FROM (SELECT ci AS x FROM labels) s GROUP BY
// x` groups citext values). Taking every subquery's outputs, whichever
// the name resolves to, only adds expressions to check.
func derivedOutputs(sel *pg_query.SelectStmt) map[string][]*pg_query.Node {
	out := map[string][]*pg_query.Node{}
	add := func(st *pg_query.SelectStmt, renames []*pg_query.Node) {
		if st == nil {
			return
		}
		arms := setArms(st, nil)
		for i, t := range arms[0].TargetList {
			name := outputName(t.GetResTarget())
			if i < len(renames) {
				name = renames[i].GetString_().GetSval()
			}
			if name == "" {
				continue
			}
			for _, arm := range arms {
				if i < len(arm.TargetList) {
					if v := arm.TargetList[i].GetResTarget().GetVal(); v != nil {
						out[name] = append(out[name], v)
					}
				}
			}
		}
	}
	walk(sel.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.SelectStmt:
			if x != sel {
				add(x, nil)
			}
		case *pg_query.RangeSubselect:
			add(x.Subquery.GetSelectStmt(), x.GetAlias().GetColnames())
		case *pg_query.CommonTableExpr:
			add(x.Ctequery.GetSelectStmt(), x.Aliascolnames)
		}
		return true
	})
	return out
}

// columnAlike reports a column reference that names, in every table of
// refs that has a column of its name, a column whose equal values are
// written alike. A name no table has (a derived table's or a CTE's
// column, an output alias) is let through here: keepsOneOfEqual follows
// a derived output to its defining expressions (derivedOutputs), and an
// output alias is checked as the expression it names (groupItem).
func (c *planCtx) columnAlike(cr *pg_query.ColumnRef, refs []*tableRef) bool {
	name, tables, _, ok := c.columnTables(cr, refs)
	if !ok {
		return false
	}
	for _, r := range tables {
		t, err := c.columnType(r.name, name)
		if err != nil || !alikeWhenEqual(t) {
			return false
		}
		if t == shardfunc.Numeric && !c.numericScaleFixed(r.name, name) {
			return false
		}
		if coll, ok := c.textCollation(r, name, t); ok && coll.Nondeterministic {
			return false
		}
	}
	return true
}

// columnTables resolves a column reference (name, or qualifier.name) to
// the tables of refs, catalogs aside, that may hold it: those (named by
// the qualifier, if any) whose columns include name. qualifiedMiss: a
// table the qualifier names lacks the column (a derived table's alias
// shadowing it, or an error Postgres reports). ok is false for other
// shapes (*, more parts) or when a table's columns cannot be read.
func (c *planCtx) columnTables(cr *pg_query.ColumnRef, refs []*tableRef) (name string, tables []*tableRef, qualifiedMiss, ok bool) {
	var qual string
	switch len(cr.Fields) {
	case 1:
		name = cr.Fields[0].GetString_().GetSval()
	case 2:
		qual, name = cr.Fields[0].GetString_().GetSval(), cr.Fields[1].GetString_().GetSval()
	default:
		return "", nil, false, false
	}
	if name == "" {
		return "", nil, false, false // *
	}
	for _, r := range refs {
		if r.catalog || qual != "" && r.qualifier() != qual {
			continue
		}
		cols, err := c.columnNames(r.name)
		if err != nil {
			return "", nil, false, false
		}
		if contains(cols, name) {
			tables = append(tables, r)
		} else if qual != "" {
			qualifiedMiss = true
		}
	}
	return name, tables, qualifiedMiss, true
}

// typmodSchema is what a Schema may also answer: a column's type
// modifier (pg_attribute.atttypmod, -1 for none). A Schema that does not
// answer has no numeric column with a fixed scale.
type typmodSchema interface {
	ColumnTypmod(db, schema, table, column string) (int32, error)
}

// numericScaleFixed reports whether a numeric column's type fixes its
// scale (numeric(p,s)), so that equal values are stored alike.
func (c *planCtx) numericScaleFixed(n TableName, column string) bool {
	ts, ok := c.schema.(typmodSchema)
	if !ok {
		return false
	}
	mod, err := ts.ColumnTypmod(n.Database, n.Schema, n.Table, column)
	if err != nil {
		c.noCache = true
		return false
	}
	return mod >= 0
}

// groupItem is what a GROUP BY or DISTINCT ON item names: the output
// column of a position (GROUP BY 1) or of an output name no table column
// shadows as far as the planner can tell (GROUP BY c1, a bare name equal
// to an alias), as well as the item itself; or the item.
func groupItem(item *pg_query.Node, targets []*pg_query.Node) *pg_query.Node {
	if a := item.GetAConst(); a != nil {
		if i, ok := a.Val.(*pg_query.A_Const_Ival); ok && i.Ival.Ival >= 1 && int(i.Ival.Ival) <= len(targets) {
			return targets[i.Ival.Ival-1].GetResTarget().GetVal()
		}
		return item
	}
	if cr := item.GetColumnRef(); cr != nil && len(cr.Fields) == 1 {
		name := cr.Fields[0].GetString_().GetSval()
		for _, t := range targets {
			if rt := t.GetResTarget(); rt.GetName() == name && name != "" {
				// Both: Postgres takes a table column of that name first.
				return &pg_query.Node{Node: &pg_query.Node_List{List: &pg_query.List{Items: []*pg_query.Node{item, rt.GetVal()}}}}
			}
		}
	}
	return item
}
