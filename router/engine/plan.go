package engine

import (
	"fmt"
	"strings"
)

// Plan is the router's side of a read several shards answer, as the
// planner built it: how the shards' rows combine, from the bottom up.
type Plan struct {
	// Merge: each shard sorted its rows by these keys (the statement's
	// ORDER BY): merge them k-way. Empty: concatenate.
	Merge []SortKey
	// Aggregate: final aggregation, one AggColumn per output column;
	// nil for none. Scalar: no GROUP BY (one row even for no input).
	Aggregate []AggColumn
	Scalar    bool
	// Having: conditions on the aggregated rows (HAVING), all of which
	// must hold.
	Having []Condition
	// Sort: order the aggregated rows by these keys.
	Sort []SortKey
	// Offset, and Limit (negative: none), applied last.
	Offset int64
	Limit  int64
	// ShardSQL: what each shard runs instead of the statement (its
	// LIMIT and OFFSET apply to the merged rows, not to each shard's);
	// empty: the statement as written.
	ShardSQL string
}

// Build makes the plan's operator tree over one input per shard, whose
// columns are in the formats format says, holding whatever it needs in
// memory.
func (p *Plan) Build(inputs []Operator, format func(column int) Format) Operator {
	return p.BuildWithin(inputs, format, nil)
}

// BuildWithin is Build under a memory budget: its Sort and Aggregate
// spill to mem's files past it (nil: no budget).
func (p *Plan) BuildWithin(inputs []Operator, format func(column int) Format, mem *Memory) Operator {
	// Each operator that may spill gets its share of the budget.
	aggMem, sortMem := mem, mem
	if p.Aggregate != nil && len(p.Sort) > 0 {
		aggMem, sortMem = mem.share(2), mem.share(2)
	}
	var op Operator
	if len(p.Merge) > 0 {
		op = NewMerge(inputs, p.Merge, format)
	} else {
		op = NewConcat(inputs...)
	}
	if p.Aggregate != nil {
		agg := NewAggregate(op, p.Aggregate, p.Scalar, format)
		agg.mem = aggMem
		op = agg
	}
	if len(p.Having) > 0 {
		op = NewFilter(op, p.Having, format)
	}
	if len(p.Sort) > 0 {
		sort := NewSort(op, p.Sort, format)
		sort.mem = sortMem
		op = sort
	}
	if p.Offset > 0 || p.Limit >= 0 {
		op = NewLimit(op, p.Offset, p.Limit)
	}
	return op
}

// Describe lists the operator tree, the root first, one operator a line,
// each input indented under it, the leaves (one line per shard: what it
// runs) last (EXPLAIN (TESSERA)).
func (p *Plan) Describe(leaves []string) []string {
	var lines []string
	depth := 0
	add := func(s string) {
		lines = append(lines, strings.Repeat("  ", depth)+s)
		depth++
	}
	if p.Offset > 0 || p.Limit >= 0 {
		add(fmt.Sprintf("Limit (offset %d, count %s)", p.Offset, limitText(p.Limit)))
	}
	if len(p.Sort) > 0 {
		add("Sort by " + keysText(p.Sort))
	}
	if len(p.Having) > 0 {
		var conds []string
		for _, c := range p.Having {
			conds = append(conds, c.String())
		}
		add("Filter: " + strings.Join(conds, " AND "))
	}
	if p.Aggregate != nil {
		var cols []string
		for i, c := range p.Aggregate {
			cols = append(cols, fmt.Sprintf("$%d %s", i+1, c.Func))
		}
		kind := "Aggregate by group"
		if p.Scalar {
			kind = "Aggregate (scalar)"
		}
		add(kind + ": " + strings.Join(cols, ", "))
	}
	if len(p.Merge) > 0 {
		add("Merge by " + keysText(p.Merge))
	} else {
		add("Concat")
	}
	for _, l := range leaves {
		lines = append(lines, strings.Repeat("  ", depth)+l)
	}
	return lines
}

func limitText(n int64) string {
	if n < 0 {
		return "all"
	}
	return fmt.Sprint(n)
}

func keysText(keys []SortKey) string {
	var out []string
	for _, k := range keys {
		s := fmt.Sprintf("$%d", k.Column+1)
		if k.Desc {
			s += " DESC"
		}
		if k.NullsFirst != k.Desc {
			if k.NullsFirst {
				s += " NULLS FIRST"
			} else {
				s += " NULLS LAST"
			}
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
}
