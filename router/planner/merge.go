package planner

import pg_query "github.com/pganalyze/pg_query_go/v6"

// MergeKind says how the router combines the answers of a read that runs
// on several shards, beyond passing their rows on.
type MergeKind int

const (
	// MergeRows: the shards' rows, concatenated, are the answer.
	MergeRows MergeKind = iota
	// MergeCounts: each shard answers one row of counts (a SELECT whose
	// every output column is count(*) or count(expr)); the answer is one
	// row of their sums.
	MergeCounts
	// MergeLimit: a SELECT with a LIMIT and no ORDER BY, which asks for
	// any n rows; each shard returns at most n, and the first n of their
	// rows are the answer (Statement.Limit says n).
	MergeLimit
)

// Limit is the n of a LIMIT the router applies across shards: a value
// written in the statement, or the parameter that holds it.
type Limit struct {
	Value int64 // when Param is 0
	Param int   // 1-based parameter number, or 0
}

// countsOnly reports whether q is a SELECT whose only cross-shard
// construct is its output list of counts: every output column a plain
// count(*) or count(expr) (FILTER allowed, DISTINCT not: a value counted
// on two shards would count twice), no other aggregate anywhere, and
// nothing else (GROUP BY, ORDER BY, LIMIT, DISTINCT, ...) to combine. The
// sum of the shards' counts is then exactly the count over all the data.
func countsOnly(q *query, f *facts) bool {
	s := q.sel
	if s == nil || f.crossOther || f.limits > 0 || s.Op != pg_query.SetOperation_SETOP_NONE || len(s.TargetList) == 0 || len(s.TargetList) != f.aggCalls {
		return false
	}
	for _, t := range s.TargetList {
		fc := t.GetResTarget().GetVal().GetFuncCall()
		if fc == nil || funcName(fc) != "count" || fc.AggDistinct || fc.AggWithinGroup || len(fc.AggOrder) > 0 || fc.Over != nil {
			return false
		}
		if len(fc.Funcname) == 2 && fc.Funcname[0].GetString_().GetSval() != "pg_catalog" {
			return false // a count of another schema is somebody's own function
		}
		if !(fc.AggStar && len(fc.Args) == 0) && len(fc.Args) != 1 {
			return false
		}
	}
	return true
}

// limitOnly reports whether q is a SELECT whose only cross-shard construct
// is its own LIMIT (no ORDER BY, OFFSET, aggregate, LIMIT in a subquery,
// ...), and returns it: the first n rows of the shards' answers, each
// limited to n, are then a valid answer, as any n rows are.
func (c *planCtx) limitOnly(q *query, f *facts) (Limit, bool) {
	s := q.sel
	// FOR UPDATE would lock rows on every shard, more than the n returned.
	if s == nil || f.crossOther || f.aggCalls > 0 || f.limits != 1 || f.locking || s.Op != pg_query.SetOperation_SETOP_NONE ||
		s.LimitCount == nil || s.LimitOffset != nil || len(s.SortClause) > 0 {
		return Limit{}, false
	}
	switch n := s.LimitCount.GetNode().(type) {
	case *pg_query.Node_AConst:
		if v, ok := n.AConst.Val.(*pg_query.A_Const_Ival); ok && v.Ival.Ival >= 0 {
			// The value is part of the plan: cache it under its text.
			c.exact = true
			return Limit{Value: int64(v.Ival.Ival)}, true
		}
	case *pg_query.Node_ParamRef:
		return Limit{Param: int(n.ParamRef.Number)}, n.ParamRef.Number > 0
	}
	return Limit{}, false
}
