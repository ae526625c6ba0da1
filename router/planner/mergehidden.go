package planner

import (
	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"

	"github.com/tesseradb/tessera/router/engine"
)

// hiddenColumns are the output columns an engine plan's ShardSQL adds
// after the statement's own (engine.Plan.Hidden): the sum and count of an
// avg, group keys and sort keys the statement does not show, an
// aggregate it orders by, the argument of count(DISTINCT x). The router
// reads them and drops them from the answer.
type hiddenColumns struct {
	visible int
	targets []*pg_query.Node // ResTargets appended to the shards' SELECT
	outs    []engineOutput   // what each one is
}

// add appends expr as a hidden column and returns its position among all
// the shards' columns.
func (h *hiddenColumns) add(expr *pg_query.Node, o engineOutput) int {
	h.targets = append(h.targets, &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{Val: expr}}})
	h.outs = append(h.outs, o)
	return h.visible + len(h.outs) - 1
}

// column finds the hidden column showing the table's column name, or -1.
func (h *hiddenColumns) column(name string) int {
	for i, o := range h.outs {
		if o.agg == engine.GroupKey && o.column == name {
			return h.visible + i
		}
	}
	return -1
}

// output is the i-th of all the shards' columns.
func (h *hiddenColumns) output(outs []engineOutput, i int) engineOutput {
	if i < len(outs) {
		return outs[i]
	}
	return h.outs[i-len(outs)]
}

// all is the outputs of the shards' rows: the statement's, then the
// hidden ones.
func (h *hiddenColumns) all(outs []engineOutput) []engineOutput {
	return append(append([]engineOutput(nil), outs...), h.outs...)
}

// addAggregate appends an aggregate call the statement does not show
// (ORDER BY sum(x)), with the sum and count of an avg.
func (h *hiddenColumns) addAggregate(call *pg_query.FuncCall, a aggCall) int {
	o := engineOutput{agg: a.fn, typ: a.typ, call: call, distinct: a.distinct}
	return h.add(&pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: call}}, o)
}

// avgParts appends the sum and count that an avg call is computed from,
// with the call's FILTER, and returns their positions.
func (h *hiddenColumns) avgParts(call *pg_query.FuncCall) (sum, count int) {
	part := func(name string, fn engine.AggFunc, typ engine.Type) int {
		c := proto.Clone(call).(*pg_query.FuncCall)
		c.Funcname = []*pg_query.Node{{Node: &pg_query.Node_String_{String_: &pg_query.String{Sval: "pg_catalog"}}}, {Node: &pg_query.Node_String_{String_: &pg_query.String{Sval: name}}}}
		return h.add(&pg_query.Node{Node: &pg_query.Node_FuncCall{FuncCall: c}}, engineOutput{agg: fn, typ: typ, call: c})
	}
	return part("sum", engine.SumNumeric, engine.Numeric), part("count", engine.SumCounts, engine.Int)
}

// columnRef is a reference to a column by its bare name (a SELECT of one
// table; mergeScope.ref qualifies it over several).
func columnRef(name string) *pg_query.Node {
	return &pg_query.Node{Node: &pg_query.Node_ColumnRef{ColumnRef: &pg_query.ColumnRef{
		Fields: []*pg_query.Node{{Node: &pg_query.Node_String_{String_: &pg_query.String{Sval: name}}}}}}}
}

// shardSelect is s as the shards run it: with the hidden columns after
// its own, grouped also by groupBy (the DISTINCT argument), without
// HAVING, ORDER BY, LIMIT and OFFSET when the router applies them
// (aggregated), or with limit as its LIMIT and no OFFSET (ordered rows).
func (c *planCtx) shardSelect(s *pg_query.SelectStmt, h *hiddenColumns, groupBy *pg_query.Node, aggregated bool, limit *pg_query.Node) string {
	shard := proto.Clone(s).(*pg_query.SelectStmt)
	shard.TargetList = append(shard.TargetList, h.targets...)
	if groupBy != nil {
		shard.GroupClause = append(shard.GroupClause, groupBy)
	}
	if aggregated {
		shard.HavingClause, shard.SortClause = nil, nil
	}
	return c.withLimit(shard, limit, nil)
}
