package engine

import (
	"fmt"
	"slices"
	"strings"
	"time"
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
	return p.build(inputs, format, mem, func(op Operator) Operator { return op })
}

// OperatorStats is what one operator of a plan did while it ran, for
// EXPLAIN (TESSERA, ANALYZE): the rows it returned and the time spent in
// it, its inputs' included (the time its Merge or Concat waited for the
// shards too), as Postgres's EXPLAIN ANALYZE counts actual time.
type OperatorStats struct {
	Name string // as Describe names it
	Rows int64
	Time time.Duration
}

// BuildAnalyzed is BuildWithin with each operator counted: the stats
// are in Describe's order, the root first.
func (p *Plan) BuildAnalyzed(inputs []Operator, format func(column int) Format, mem *Memory) (Operator, []*OperatorStats) {
	var stats []*OperatorStats
	op := p.build(inputs, format, mem, func(op Operator) Operator {
		st := &OperatorStats{}
		stats = append(stats, st)
		return &counted{op: op, stats: st}
	})
	slices.Reverse(stats) // built from the bottom up
	names := p.operatorNames()
	for i, st := range stats {
		if i < len(names) {
			st.Name = names[i]
		}
	}
	return op, stats
}

// counted is an operator that counts its rows and time.
type counted struct {
	op    Operator
	stats *OperatorStats
}

func (c *counted) Next() (Row, bool, error) {
	start := time.Now()
	row, ok, err := c.op.Next()
	c.stats.Time += time.Since(start)
	if ok && err == nil {
		c.stats.Rows++
	}
	return row, ok, err
}

// build makes the operator tree, passing each operator through track as
// it is made, from the bottom up.
func (p *Plan) build(inputs []Operator, format func(column int) Format, mem *Memory, track func(Operator) Operator) Operator {
	// Each operator that may spill gets its share of the budget.
	aggMem, sortMem := mem, mem
	if p.Aggregate != nil && len(p.Sort) > 0 {
		aggMem, sortMem = mem.share(2), mem.share(2)
	}
	var op Operator
	if len(p.Merge) > 0 {
		op = track(NewMerge(inputs, p.Merge, format))
	} else {
		op = track(NewConcat(inputs...))
	}
	if p.PreAggregate != nil {
		op = track(NewAggregate(op, p.PreAggregate, false, format))
	}
	if p.Aggregate != nil {
		agg := NewAggregate(op, p.Aggregate, p.Scalar, format)
		agg.mem = aggMem
		op = track(agg)
	}
	if len(p.Having) > 0 {
		op = track(NewFilter(op, p.Having, format))
	}
	if len(p.Sort) > 0 {
		sort := NewSort(op, p.Sort, format)
		sort.mem = sortMem
		op = track(sort)
	}
	if p.Offset > 0 || p.Limit >= 0 {
		op = track(NewLimit(op, p.Offset, p.Limit))
	}
	if p.Hidden > 0 {
		op = track(NewProject(op, p.Hidden))
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
	names := p.operatorNames()
	for depth, name := range names {
		lines = append(lines, strings.Repeat("  ", depth)+name)
	}
	for _, l := range leaves {
		lines = append(lines, strings.Repeat("  ", len(names))+l)
	}
	return lines
}

// operatorNames names the plan's operators, the root first, one per
// operator build makes.
func (p *Plan) operatorNames() []string {
	var names []string
	if p.Hidden > 0 {
		names = append(names, fmt.Sprintf("Project (without the last %d columns)", p.Hidden))
	}
	if p.Offset > 0 || p.Limit >= 0 {
		names = append(names, fmt.Sprintf("Limit (offset %d, count %s)", p.Offset, limitText(p.Limit)))
	}
	if len(p.Sort) > 0 {
		names = append(names, "Sort by "+keysText(p.Sort))
	}
	if len(p.Having) > 0 {
		var conds []string
		for _, c := range p.Having {
			conds = append(conds, c.String())
		}
		names = append(names, "Filter: "+strings.Join(conds, " AND "))
	}
	if p.Aggregate != nil {
		kind := "Aggregate by group"
		if p.Scalar {
			kind = "Aggregate (scalar)"
		}
		names = append(names, kind+": "+aggText(p.Aggregate))
	}
	if p.PreAggregate != nil {
		names = append(names, "Aggregate by group and DISTINCT value: "+aggText(p.PreAggregate))
	}
	if len(p.Merge) > 0 {
		names = append(names, "Merge by "+keysText(p.Merge))
	} else {
		names = append(names, "Concat")
	}
	return names
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
