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
// alike (text and varchar under a deterministic collation). Numeric is
// let through: a column with a scale in its type (numeric(15,2)) holds
// every value at that scale; an unconstrained numeric column holding 1.0
// and 1.00 is the known gap (checking the column's typmod is planned).
// Types the planner does not know (citext, float8, jsonb, enums,
// arrays) are not.
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
	check := func(n *pg_query.Node) {
		if n == nil || found {
			return
		}
		walk(n.ProtoReflect(), func(m proto.Message) bool {
			if cr, ok := m.(*pg_query.ColumnRef); ok && !c.columnAlike(cr, refs) {
				found = true
			}
			return !found
		})
	}
	walk(sel.ProtoReflect(), func(m proto.Message) bool {
		switch x := m.(type) {
		case *pg_query.SelectStmt:
			for _, g := range x.GroupClause {
				check(g)
			}
			if len(x.DistinctClause) > 0 {
				for _, d := range x.DistinctClause {
					check(d) // DISTINCT ON's expressions
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

// columnAlike reports a column reference that names, in every table of
// refs that has a column of its name, a column whose equal values are
// written alike. A name no table has (a derived table's or a CTE's
// column, an output alias) is let through: the clause that defines it
// reads table columns, and those are checked where it keeps one of
// several equal values; a derived column of citext grouped again outside
// its subquery is the known gap.
func (c *planCtx) columnAlike(cr *pg_query.ColumnRef, refs []*tableRef) bool {
	var qual, name string
	switch len(cr.Fields) {
	case 1:
		name = cr.Fields[0].GetString_().GetSval()
	case 2:
		qual, name = cr.Fields[0].GetString_().GetSval(), cr.Fields[1].GetString_().GetSval()
	default:
		return false
	}
	if name == "" {
		return false // *
	}
	for _, r := range refs {
		if r.catalog || qual != "" && r.qualifier() != qual {
			continue
		}
		cols, err := c.columnNames(r.name)
		if err != nil {
			return false
		}
		if !contains(cols, name) {
			continue
		}
		t, err := c.columnType(r.name, name)
		if err != nil || !alikeWhenEqual(t) {
			return false
		}
		if coll, ok := c.textCollation(r, name, t); ok && coll.Nondeterministic {
			return false
		}
	}
	return true
}
