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
	// PreAggregate: a first aggregation, before Aggregate, of rows the
	// shards grouped by more keys than the statement's: for
	// count(DISTINCT x) each shard groups by the statement's keys and x,
	// this removes the groups two shards both have, and Aggregate then
	// counts the values of x. nil for none.
	PreAggregate []AggColumn
	// Aggregate: final aggregation, one AggColumn per column of the
	// shards' rows; nil for none. Scalar: no GROUP BY (one row even for
	// no input).
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
	// Hidden: how many columns ShardSQL adds after the statement's own
	// (partial aggregates, group and sort keys the statement does not
	// show); the router reads them and drops them from the answer, its
	// RowDescription included. Visible: the statement's own columns,
	// set with Hidden.
	Hidden, Visible int
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
	if p.PreAggregate != nil {
		op = NewAggregate(op, p.PreAggregate, false, format)
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
	if p.Hidden > 0 {
		op = NewProject(op, p.Hidden)
	}
	return op
}

// OrdersBytes reports whether the plan orders text by its bytes (a sort
// key or a min or max of type Bytes): its answer is Postgres's only if
// the shards send text in UTF-8, whose byte order is the code points'.
func (p *Plan) OrdersBytes() bool {
	for _, keys := range [][]SortKey{p.Merge, p.Sort} {
		for _, k := range keys {
			if k.Type == Bytes {
				return true
			}
		}
	}
	for _, cols := range [][]AggColumn{p.PreAggregate, p.Aggregate} {
		for _, c := range cols {
			if (c.Func == Min || c.Func == Max) && c.Type == Bytes {
				return true
			}
		}
	}
	return false
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
	if p.Hidden > 0 {
		add(fmt.Sprintf("Project (without the last %d columns)", p.Hidden))
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
		kind := "Aggregate by group"
		if p.Scalar {
			kind = "Aggregate (scalar)"
		}
		add(kind + ": " + aggText(p.Aggregate))
	}
	if p.PreAggregate != nil {
		add("Aggregate by group and DISTINCT value: " + aggText(p.PreAggregate))
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

func aggText(cols []AggColumn) string {
	var out []string
	for i, c := range cols {
		s := fmt.Sprintf("$%d %s", i+1, c.Func)
		if c.Func == Avg {
			s += fmt.Sprintf("($%d / $%d)", c.Sum+1, c.Count+1)
		}
		out = append(out, s)
	}
	return strings.Join(out, ", ")
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
