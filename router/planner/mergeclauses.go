package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"

	"github.com/tesseradb/tessera/router/engine"
)

// The clauses an engine plan reads from the statement's text (HAVING,
// LIMIT, OFFSET) and the SQL the shards run without them.

// havingConditions reads a HAVING that is a conjunction of comparisons
// of an integer aggregate with an integer literal: an output's (the same
// call, written the same way), or one the statement does not show, which
// becomes a hidden column (h).
func (c *planCtx) havingConditions(n *pg_query.Node, s *pg_query.SelectStmt, scope *mergeScope, outs []engineOutput, h *hiddenColumns) ([]engine.Condition, bool) {
	if b := n.GetBoolExpr(); b != nil {
		if b.Boolop != pg_query.BoolExprType_AND_EXPR {
			return nil, false
		}
		var out []engine.Condition
		for _, arg := range b.Args {
			conds, ok := c.havingConditions(arg, s, scope, outs, h)
			if !ok {
				return nil, false
			}
			out = append(out, conds...)
		}
		return out, true
	}
	e := n.GetAExpr()
	if e == nil || e.Kind != pg_query.A_Expr_Kind_AEXPR_OP || len(e.Name) != 1 {
		return nil, false
	}
	op := e.Name[0].GetString_().GetSval()
	call, lit := e.Lexpr, e.Rexpr
	if lit.GetAConst() == nil {
		call, lit = lit, call
		op = flipped[op]
	}
	v, ok := lit.GetAConst().GetVal().(*pg_query.A_Const_Ival)
	if !ok || call.GetFuncCall() == nil || !validOps[op] {
		return nil, false
	}
	i := outputCall(s.TargetList, outs, call)
	if i < 0 && len(s.TargetList) == len(outs) {
		a, ok := c.mergeableAggregate(call.GetFuncCall(), scope)
		if !ok || a.distinct != "" {
			return nil, false
		}
		i = h.addAggregate(call.GetFuncCall(), a)
	}
	if i >= 0 && h.output(outs, i).typ == engine.Int {
		return []engine.Condition{{Column: i, Op: op, Value: int64(v.Ival.Ival)}}, true
	}
	return nil, false
}

// outputCall finds the output that is an aggregate call written as call
// is, or -1.
func outputCall(targets []*pg_query.Node, outs []engineOutput, call *pg_query.Node) int {
	if len(targets) != len(outs) {
		return -1 // a * among the outputs
	}
	for i, t := range targets {
		if outs[i].agg != engine.GroupKey && sameExpr(t.GetResTarget().GetVal(), call) {
			return i
		}
	}
	return -1
}

// flipped is each comparison with its operands swapped (3 < x: x > 3).
var flipped = map[string]string{"=": "=", "<>": "<>", "<": ">", "<=": ">=", ">": "<", ">=": "<="}

var validOps = map[string]bool{"=": true, "<>": true, "<": true, "<=": true, ">": true, ">=": true}

// sameExpr reports whether two expressions are written alike, wherever
// they are in the text.
func sameExpr(a, b *pg_query.Node) bool {
	return proto.Equal(withoutLocations(a), withoutLocations(b))
}

func withoutLocations(n *pg_query.Node) *pg_query.Node {
	c := proto.Clone(n).(*pg_query.Node)
	clearLocations(c.ProtoReflect())
	return c
}

func clearLocations(m protoreflect.Message) {
	var located []protoreflect.FieldDescriptor
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case fd.Name() == "location":
			located = append(located, fd)
		case fd.IsList() && fd.Message() != nil:
			for i, l := 0, v.List(); i < l.Len(); i++ {
				clearLocations(l.Get(i).Message())
			}
		case fd.Message() != nil && !fd.IsMap():
			clearLocations(v.Message())
		}
		return true
	})
	for _, fd := range located {
		m.Clear(fd)
	}
}

// withLimit is s deparsed with another LIMIT and OFFSET (nil: none).
func (c *planCtx) withLimit(s *pg_query.SelectStmt, limit, offset *pg_query.Node) string {
	shard := proto.Clone(s).(*pg_query.SelectStmt)
	shard.LimitCount, shard.LimitOffset = limit, offset
	if limit == nil {
		shard.LimitOption = pg_query.LimitOption_LIMIT_OPTION_DEFAULT
	}
	sql, err := pg_query.Deparse(&pg_query.ParseResult{Version: c.version, Stmts: []*pg_query.RawStmt{{Stmt: &pg_query.Node{Node: &pg_query.Node_SelectStmt{SelectStmt: shard}}}}})
	if err != nil {
		return ""
	}
	return sql
}

// literalCount reads a LIMIT or OFFSET: absent (dflt), or an integer
// literal of at least 0. Anything else (a parameter, an expression, NULL,
// ALL) is not read.
func literalCount(n *pg_query.Node, dflt int64) (int64, bool) {
	if n == nil {
		return dflt, true
	}
	v, ok := n.GetAConst().GetVal().(*pg_query.A_Const_Ival)
	if !ok || v.Ival.Ival < 0 {
		return 0, false
	}
	return int64(v.Ival.Ival), true
}

func intConst(n int64) *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_AConst{AConst: &pg_query.A_Const{Val: &pg_query.A_Const_Ival{Ival: &pg_query.Integer{Ival: int32(n)}}}}}
}
