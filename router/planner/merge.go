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
)

// countsOnly reports whether q is a SELECT whose only cross-shard
// construct is its output list of counts: every output column a plain
// count(*) or count(expr) (FILTER allowed, DISTINCT not: a value counted
// on two shards would count twice), no other aggregate anywhere, and
// nothing else (GROUP BY, ORDER BY, LIMIT, DISTINCT, ...) to combine. The
// sum of the shards' counts is then exactly the count over all the data.
func countsOnly(q *query, f *facts) bool {
	s := q.sel
	if s == nil || f.crossOther || s.Op != pg_query.SetOperation_SETOP_NONE || len(s.TargetList) == 0 || len(s.TargetList) != f.aggCalls {
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
