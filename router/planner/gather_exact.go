package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/tesseradb/tessera/topo/shardfunc"
	"google.golang.org/protobuf/proto"
)

// Floating-point sums depend on the order they add in: Postgres
// accumulates float8 in the order it reads the rows, and a gather's
// temporary tables hold the rows in another order than one Postgres's
// heap (each shard's after the previous shard's), so the last bits of a
// float sum, avg or stddev may differ. A gather therefore requires the
// arguments of the aggregates that add (sum, avg, the variances and
// regressions) to be exact: built of integer or numeric columns,
// numeric constants, + - * / %, CASE, COALESCE and casts to integer or
// numeric types. Anything else keeps the refusal.

// addingAggregates are the aggregates whose float results depend on the
// order of their input.
var addingAggregates = map[string]bool{
	"sum": true, "avg": true, "stddev": true, "stddev_samp": true, "stddev_pop": true,
	"variance": true, "var_samp": true, "var_pop": true, "corr": true, "covar_pop": true,
	"covar_samp": true, "regr_avgx": true, "regr_avgy": true, "regr_count": true,
	"regr_intercept": true, "regr_r2": true, "regr_slope": true, "regr_sxx": true,
	"regr_sxy": true, "regr_syy": true,
}

// exactTypeNames are the casts whose results are exact.
var exactTypeNames = map[string]bool{
	"int2": true, "int4": true, "int8": true, "smallint": true, "integer": true,
	"bigint": true, "int": true, "numeric": true, "decimal": true,
}

// inexactAggregates reports an adding aggregate with an argument not
// proven exact.
func (c *planCtx) inexactAggregates(sel *pg_query.SelectStmt, refs []*tableRef) bool {
	inexact := false
	e := &exactness{c: c, outputs: derivedOutputs(sel), following: map[string]bool{}}
	walk(sel.ProtoReflect(), func(m proto.Message) bool {
		fc, ok := m.(*pg_query.FuncCall)
		if !ok || len(fc.Funcname) == 0 {
			return !inexact
		}
		if addingAggregates[fc.Funcname[len(fc.Funcname)-1].GetString_().GetSval()] {
			for _, a := range fc.Args {
				if !e.value(a, refs) {
					inexact = true
				}
			}
		}
		return !inexact
	})
	return inexact
}

// setArms lists the plain SELECTs of a set operation, left to right (a
// plain SELECT is its own one arm).
func setArms(st *pg_query.SelectStmt, out []*pg_query.SelectStmt) []*pg_query.SelectStmt {
	if st.Op == pg_query.SetOperation_SETOP_NONE {
		return append(out, st)
	}
	return setArms(st.Rarg, setArms(st.Larg, out))
}

// outputName is the column name Postgres gives a select-list item when
// it can be told from the parse tree, else "".
func outputName(rt *pg_query.ResTarget) string {
	if rt.GetName() != "" {
		return rt.GetName()
	}
	if cr := rt.GetVal().GetColumnRef(); cr != nil {
		return cr.Fields[len(cr.Fields)-1].GetString_().GetSval()
	}
	return ""
}

// exactness proves expressions exact.
type exactness struct {
	c *planCtx
	// outputs are the expressions of the statement's subqueries' output
	// columns by name (derivedOutputs): a column of a derived table or
	// CTE is proven exact when every output of its name anywhere is.
	outputs map[string][]*pg_query.Node
	// following: the names whose outputs are being proven; a name met
	// again inside them (an output named as the column it selects, a
	// recursive CTE's column) adds nothing new to prove.
	following map[string]bool
}

// value reports an expression proven to have an integer or numeric value.
func (e *exactness) value(n *pg_query.Node, refs []*tableRef) bool {
	switch x := n.GetNode().(type) {
	case *pg_query.Node_ColumnRef:
		return e.column(x.ColumnRef, refs)
	case *pg_query.Node_AConst:
		k := x.AConst
		return k.Isnull || k.GetIval() != nil || k.GetFval() != nil
	case *pg_query.Node_AExpr:
		ax := x.AExpr
		if ax.Kind != pg_query.A_Expr_Kind_AEXPR_OP || len(ax.Name) != 1 {
			return false
		}
		switch ax.Name[0].GetString_().GetSval() {
		case "+", "-", "*", "/", "%":
		default:
			return false
		}
		return (ax.Lexpr == nil || e.value(ax.Lexpr, refs)) && e.value(ax.Rexpr, refs)
	case *pg_query.Node_CaseExpr:
		for _, w := range x.CaseExpr.Args {
			if !e.value(w.GetCaseWhen().GetResult(), refs) {
				return false
			}
		}
		return x.CaseExpr.Defresult == nil || e.value(x.CaseExpr.Defresult, refs)
	case *pg_query.Node_CoalesceExpr:
		for _, a := range x.CoalesceExpr.Args {
			if !e.value(a, refs) {
				return false
			}
		}
		return true
	case *pg_query.Node_TypeCast:
		names := x.TypeCast.GetTypeName().GetNames()
		return len(names) > 0 && exactTypeNames[names[len(names)-1].GetString_().GetSval()] &&
			len(x.TypeCast.GetTypeName().GetArrayBounds()) == 0
	}
	return false
}

// column reports a column reference every table it may name has as an
// integer or numeric column, or, naming no table's column, whose every
// subquery output of that name is exact.
func (e *exactness) column(cr *pg_query.ColumnRef, refs []*tableRef) bool {
	name, tables, qualifiedMiss, ok := e.c.columnTables(cr, refs)
	if !ok || qualifiedMiss {
		return false
	}
	for _, r := range tables {
		t, err := e.c.columnType(r.name, name)
		if err != nil {
			return false
		}
		switch t {
		case shardfunc.Int2, shardfunc.Int4, shardfunc.Int8, shardfunc.Numeric:
		default:
			return false
		}
	}
	found := len(tables) > 0
	// The name may also be a derived table's or CTE's column: every
	// output of that name must be exact too.
	defs := e.outputs[name]
	if len(defs) == 0 || e.following[name] {
		return found || e.following[name]
	}
	e.following[name] = true
	defer delete(e.following, name)
	for _, d := range defs {
		if !e.value(d, refs) {
			return false
		}
	}
	return true
}
