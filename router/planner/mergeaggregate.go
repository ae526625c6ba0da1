package planner

import (
	"slices"

	pg_query "github.com/pganalyze/pg_query_go/v6"

	"github.com/tesseradb/tessera/router/engine"
)

// aggregatedPlan: aggregates, with or without GROUP BY, or DISTINCT. Each
// shard sends its groups with partial aggregates, and hidden columns for
// what the statement does not show (hiddenColumns); the router groups
// them again by the key columns, which must be columns whose encodings
// are equal exactly when Postgres's values are, finishes the aggregates,
// then applies HAVING, ORDER BY, LIMIT and OFFSET, which the shards' SQL
// leaves out.
func (c *planCtx) aggregatedPlan(s *pg_query.SelectStmt, f *facts, scope *mergeScope, outs []engineOutput, grouped, distinct bool, offset, limit int64) (*engine.Plan, bool) {
	calls := 0
	for _, o := range outs {
		if o.agg != engine.GroupKey {
			calls++
		}
	}
	h := &hiddenColumns{visible: len(outs)}
	var having []engine.Condition
	var ok bool
	if s.HavingClause != nil {
		// The HAVING's aggregates are the outputs' own calls or hidden
		// ones, counted once more each.
		if having, ok = c.havingConditions(s.HavingClause, s, scope, outs, h); !ok {
			return nil, false
		}
		calls += len(having)
	}
	for _, n := range s.SortClause {
		// ORDER BY count(*): the output's call, or a hidden one.
		if n.GetSortBy().GetNode().GetFuncCall() != nil {
			calls++
		}
	}
	if calls != f.aggCalls {
		return nil, false // an aggregate inside an expression, a subquery, ...
	}
	keys := map[string]bool{}
	if grouped {
		if keys, ok = c.groupColumns(s, scope, outs); !ok {
			return nil, false
		}
	}
	p := &engine.Plan{Scalar: !grouped && !distinct, Having: having, Offset: offset, Limit: limit}
	shown := map[string]bool{}
	distinctArg := ""
	for _, o := range outs {
		if o.agg == engine.GroupKey && !o.constant {
			// A shown column must be a group key (DISTINCT: every output
			// is one), of a type whose encodings compare as its values.
			if o.column == "" || !(distinct || keys[o.column]) || !scope.groupable(c, o.column, o.colType) {
				return nil, false
			}
			shown[o.column] = true
		}
		if o.distinct != "" {
			if distinctArg != "" && distinctArg != o.distinct {
				return nil, false // DISTINCT over two columns: not one grouping
			}
			distinctArg = o.distinct
		}
	}
	if distinctArg != "" && p.Scalar {
		for _, o := range outs {
			if o.constant {
				// Grouped by x, a shard with no rows sends none: the
				// router's one row would have no value for the literal.
				return nil, false
			}
		}
	}
	for _, k := range sortedKeys(keys) {
		if !shown[k] {
			// A key the statement does not show: a hidden column.
			t, err := scope.columnType(c, k)
			if err != nil || !scope.groupable(c, k, t) {
				return nil, false
			}
			o := c.columnOutput(scope, k, k)
			h.add(scope.ref(k), o)
		}
	}
	if len(s.SortClause) > 0 {
		if p.Sort, ok = c.sortKeys(s, scope, outs, h, true); !ok {
			return nil, false
		}
	}
	argColumn := -1
	var groupBy *pg_query.Node // the shards group by the DISTINCT argument too
	if distinctArg != "" {
		groupBy = scope.ref(distinctArg)
		argColumn = h.add(scope.ref(distinctArg), engineOutput{column: distinctArg})
	}
	// Each column's final aggregation; an avg appends the hidden sum and
	// count it is computed from, which this loop then reaches too.
	var cols []engine.AggColumn
	for i := 0; i < len(outs)+len(h.outs); i++ {
		o := h.output(outs, i)
		if o.distinct != "" && o.distinct != distinctArg {
			return nil, false // a hidden DISTINCT aggregate over another column
		}
		col := engine.AggColumn{Func: o.agg, Type: o.typ}
		if o.agg == engine.Avg {
			col.Sum, col.Count = h.avgParts(o.call)
		}
		if i == argColumn {
			col.Func = engine.Any // a key of the first aggregation only
		}
		cols = append(cols, col)
	}
	p.Aggregate = cols
	if argColumn >= 0 {
		p.PreAggregate = preAggregate(cols, h.all(outs), argColumn)
	}
	if n := len(h.outs); n > 0 {
		p.Hidden, p.Visible = n, len(outs)
	}
	if p.Hidden > 0 || distinctArg != "" || s.LimitCount != nil || s.LimitOffset != nil || s.HavingClause != nil {
		// Each shard answers all its groups; the router filters and
		// limits the final rows.
		if p.ShardSQL = c.shardSelect(s, h, groupBy, true, nil); p.ShardSQL == "" {
			return nil, false
		}
	}
	return p, true
}

func sortedKeys(m map[string]bool) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// preAggregate is the first aggregation of a count(DISTINCT x) plan: the
// shards grouped by the statement's keys and x, so rows of one key and x
// from several shards are one group. The keys and x are its group keys;
// a DISTINCT aggregate's partial is 0 or 1 for count (the greatest
// wins: under a FILTER one shard may count x and another not) and x or
// NULL for sum; an avg's is recomputed later; the other aggregates
// combine as usual.
func preAggregate(final []engine.AggColumn, outs []engineOutput, arg int) []engine.AggColumn {
	pre := make([]engine.AggColumn, len(final))
	for i, col := range final {
		switch {
		case i == arg:
			pre[i] = engine.AggColumn{Func: engine.GroupKey}
		case outs[i].distinct != "" && col.Func == engine.SumCounts:
			// count(DISTINCT x) in a group of one x: 1 or 0, which a
			// FILTER may make differ between shards: 1 if any shard
			// counted it.
			pre[i] = engine.AggColumn{Func: engine.Max, Type: engine.Int}
		case outs[i].distinct != "" || col.Func == engine.Avg:
			// sum(DISTINCT x) in a group of one x: x, or NULL where a
			// FILTER kept no row (Any skips NULLs); an avg is computed
			// again from its sum and count.
			pre[i] = engine.AggColumn{Func: engine.Any}
		default:
			pre[i] = col
		}
	}
	return pre
}
