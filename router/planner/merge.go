package planner

import (
	"math"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/tesseradb/tessera/router/engine"
)

// MergeKind says how the router combines the answers of a read that runs
// on several shards, beyond passing their rows on.
type MergeKind int

const (
	// MergeRows: the shards' rows, concatenated, are the answer.
	MergeRows MergeKind = iota
	// MergeLimit: a SELECT with a LIMIT and no ORDER BY, which asks for
	// any n rows; each shard returns at most n, and the first n of their
	// rows are the answer (Statement.Limit says n).
	MergeLimit
	// MergeEngine: the router runs Statement.Engine, a tree of operators
	// (package engine), over the shards' answers to the statement as
	// written: each shard's rows are partial aggregates, sorted runs or
	// distinct rows that the operators finish.
	MergeEngine
)

// Limit is the n of a LIMIT the router applies across shards: a value
// written in the statement, or the parameter that holds it.
type Limit struct {
	Value int64 // when Param is 0
	Param int   // 1-based parameter number, or 0
}

// limitOnly reports whether q is a SELECT whose only cross-shard construct
// is its own LIMIT (no ORDER BY, OFFSET, aggregate, GROUP BY, DISTINCT,
// LIMIT in a subquery, ...), and returns it: the first n rows of the
// shards' answers, each limited to n, are then a valid answer, as any n
// rows are.
func (c *planCtx) limitOnly(q *query, f *facts) (Limit, bool) {
	s := q.sel
	// FOR UPDATE would lock rows on every shard, more than the n returned.
	if s == nil || f.crossOther || f.aggCalls > 0 || f.groups > 0 || f.distincts > 0 || f.offsets > 0 || f.havings > 0 || f.limits != 1 || f.orders > 0 || f.locking ||
		s.Op != pg_query.SetOperation_SETOP_NONE || s.LimitCount == nil || s.LimitOffset != nil || len(s.SortClause) > 0 {
		return Limit{}, false
	}
	switch n := s.LimitCount.GetNode().(type) {
	case *pg_query.Node_AConst:
		// The value is part of the plan, and so is whether it is usable:
		// cache the plan under its text.
		c.exact = true
		if v, ok := n.AConst.Val.(*pg_query.A_Const_Ival); ok && v.Ival.Ival >= 0 {
			return Limit{Value: int64(v.Ival.Ival)}, true
		}
	case *pg_query.Node_ParamRef:
		return Limit{Param: int(n.ParamRef.Number)}, n.ParamRef.Number > 0
	}
	return Limit{}, false
}

// enginePlan reports whether the router can finish q's answer from the
// shards' answers, and returns the operators' plan. Each shard runs the
// statement as written, or without the clauses that must apply after
// the merge (Plan.ShardSQL), so what it computes must be a partial the
// router can finish exactly:
//
//   - ORDER BY output columns of integer or bool type, LIMIT and OFFSET
//     as literals (no aggregation): each shard sends its first
//     LIMIT + OFFSET rows in order; a k-way merge, cut, is the answer.
//   - aggregates, with or without GROUP BY, or DISTINCT: each shard sends
//     its groups with partial aggregates (count, sum of int2, int4, int8
//     and numeric, min and max of integers, bool_and, bool_or, every;
//     FILTER allowed); the router groups them again by the key columns,
//     which must be output columns whose encodings are equal exactly when
//     Postgres's values are, and finishes the aggregates; then HAVING
//     (comparisons of shown integer aggregates with integer literals),
//     ORDER BY integer or bool outputs, LIMIT and OFFSET, all of which
//     the shards' SQL leaves out.
//   - the same over a join the shards answer whole (colocated tables,
//     reference tables), when each column name the statement uses is
//     one table's (mergeScope); else a list of counts (countsPlan).
//
// Anything else is refused by the caller with its crossShard reason.
func (c *planCtx) enginePlan(q *query, f *facts, scope *mergeScope) (*engine.Plan, bool) {
	s := q.sel
	if s == nil || f.locking || s.Op != pg_query.SetOperation_SETOP_NONE {
		return nil, false
	}
	if f.crossOther {
		return nil, false
	}
	if scope == nil {
		if s.LimitCount != nil || s.LimitOffset != nil {
			return nil, false
		}
		return countsPlan(s, f)
	}
	// The plan holds literals of the text (positions in ORDER BY and
	// GROUP BY, LIMIT and OFFSET counts, HAVING's constants, the shards'
	// SQL): cache it under its text, not its shape.
	c.exact = true
	offset, ok := literalCount(s.LimitOffset, 0)
	if !ok {
		return nil, false
	}
	limit, ok := literalCount(s.LimitCount, -1)
	if !ok {
		return nil, false
	}
	grouped := len(s.GroupClause) > 0 || s.GroupDistinct
	distinct := len(s.DistinctClause) > 0
	if distinct && (len(s.DistinctClause) != 1 || s.DistinctClause[0].GetNode() != nil) {
		return nil, false // DISTINCT ON
	}
	// Every construct the walk counted must be this SELECT's own.
	if f.groups != b2i(grouped) || f.distincts != b2i(distinct) || f.orders != b2i(len(s.SortClause) > 0) || f.limits != b2i(s.LimitCount != nil) || f.offsets != b2i(s.LimitOffset != nil) || f.havings != b2i(s.HavingClause != nil) {
		return nil, false
	}
	outs, ok := c.engineOutputs(s, scope)
	if !ok {
		return nil, false
	}
	aggregated := f.aggCalls > 0 || grouped || distinct
	if !aggregated {
		if s.HavingClause != nil {
			return nil, false // HAVING without aggregates or GROUP BY: rare, and not finished here
		}
		return c.orderedPlan(s, scope, outs, offset, limit)
	}
	if s.GroupDistinct || distinct && (grouped || f.aggCalls > 0) {
		return nil, false
	}
	return c.aggregatedPlan(s, f, scope, outs, grouped, distinct, offset, limit)
}

// countsPlan: a SELECT of several tables (colocated) whose every output
// column is a count and which combines nothing else: the sum of the
// shards' counts is the count over all the data.
func countsPlan(s *pg_query.SelectStmt, f *facts) (*engine.Plan, bool) {
	if f.groups > 0 || f.distincts > 0 || f.orders > 0 || f.limits > 0 || f.offsets > 0 || f.havings > 0 || len(s.TargetList) == 0 || len(s.TargetList) != f.aggCalls {
		return nil, false
	}
	p := &engine.Plan{Scalar: true, Limit: -1}
	for _, t := range s.TargetList {
		fc := t.GetResTarget().GetVal().GetFuncCall()
		if fc == nil || funcName(fc) != "count" || !builtinCall(fc) || fc.AggDistinct || fc.AggWithinGroup || len(fc.AggOrder) > 0 || fc.Over != nil ||
			fc.AggStar != (len(fc.Args) == 0) || len(fc.Args) > 1 {
			return nil, false
		}
		p.Aggregate = append(p.Aggregate, engine.AggColumn{Func: engine.SumCounts, Type: engine.Int})
	}
	return p, true
}

// orderedPlan: ORDER BY, LIMIT and OFFSET with nothing to aggregate.
// With an ORDER BY each shard sorts its rows and the router merges them;
// without one any rows will do. Sort keys that are no output are hidden
// columns. Each shard sends its first limit + offset rows; the router
// skips offset of the merged rows and passes on limit.
func (c *planCtx) orderedPlan(s *pg_query.SelectStmt, scope *mergeScope, outs []engineOutput, offset, limit int64) (*engine.Plan, bool) {
	if len(s.SortClause) == 0 && offset == 0 {
		return nil, false // a LIMIT alone is limitOnly's
	}
	p := &engine.Plan{Offset: offset, Limit: limit}
	h := &hiddenColumns{visible: len(outs)}
	if len(s.SortClause) > 0 {
		keys, ok := c.sortKeys(s, scope, outs, h, false)
		if !ok {
			return nil, false
		}
		p.Merge = keys
	}
	if n := len(h.outs); n > 0 {
		p.Hidden, p.Visible = n, len(outs)
	}
	if offset > 0 || p.Hidden > 0 {
		var shardLimit *pg_query.Node
		if limit >= 0 {
			if limit+offset > math.MaxInt32 {
				return nil, false
			}
			shardLimit = intConst(limit + offset)
		}
		if p.ShardSQL = c.shardSelect(s, h, nil, false, shardLimit); p.ShardSQL == "" {
			return nil, false
		}
	}
	return p, true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func lastField(cr *pg_query.ColumnRef) string {
	if len(cr.Fields) == 0 {
		return ""
	}
	return cr.Fields[len(cr.Fields)-1].GetString_().GetSval()
}

func isStar(cr *pg_query.ColumnRef) bool {
	return len(cr.Fields) > 0 && cr.Fields[len(cr.Fields)-1].GetAStar() != nil
}

// refersTo reports whether a qualified column reference's qualifier is
// the table's name or alias.
func refersTo(cr *pg_query.ColumnRef, table *tableRef) bool {
	q := cr.Fields[len(cr.Fields)-2].GetString_().GetSval()
	return q == table.rv.GetRelname() || table.rv.GetAlias() != nil && q == table.rv.GetAlias().GetAliasname()
}
