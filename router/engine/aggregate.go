package engine

import (
	"encoding/binary"
	"fmt"

	"github.com/jackc/pgx/v5/pgtype"

	"github.com/tesseradb/tessera/pgerr"
)

// AggFunc is how Aggregate combines one output column's partial values,
// one per shard and group, into the value Postgres computes over all the
// rows.
type AggFunc uint8

const (
	// GroupKey: a GROUP BY key (or, for DISTINCT, every column): rows
	// whose keys are byte-for-byte equal make one group.
	GroupKey AggFunc = iota
	// SumCounts: count(*) or count(x): the sum of the shards' counts
	// (int8, never NULL).
	SumCounts
	// SumInt8: sum of int2 or int4 (int8 partials, NULL for no rows):
	// their sum as int8; out of range raises 22003, as Postgres does.
	SumInt8
	// SumNumeric: sum of int8 or numeric (numeric partials): their exact
	// sum, at the largest scale, NaN and infinities as Postgres.
	SumNumeric
	// Min, Max: the least or greatest partial (of Type Int), passed on
	// as it was encoded.
	Min
	Max
	// BoolAnd, BoolOr: bool_and (every) and bool_or of the partials.
	BoolAnd
	BoolOr
	// Any: a value that is the same in every partial of a group (an
	// aggregate over a single DISTINCT value, or a column the router
	// computes from others): the first non-NULL one.
	Any
	// Avg: avg of int2, int4, int8 or numeric, from the group's sum
	// (column Sum, a SumNumeric) and count (column Count, a SumCounts):
	// numeric_div(sum, count) as Postgres computes it, NULL for no rows.
	Avg
)

var aggNames = [...]string{GroupKey: "key", SumCounts: "sum(count)", SumInt8: "sum::int8", SumNumeric: "sum::numeric",
	Min: "min", Max: "max", BoolAnd: "bool_and", BoolOr: "bool_or", Any: "any", Avg: "avg"}

func (f AggFunc) String() string { return aggNames[f] }

// AggColumn is what Aggregate does with one output column.
type AggColumn struct {
	Func AggFunc
	Type Type // of the values, for Min and Max
	// Sum and Count: for Avg, the columns (0-based) of the same row that
	// aggregate its sum and its count.
	Sum, Count int
}

// Aggregate computes the final aggregates of its input's partial rows by
// group. Scalar (no GROUP BY) answers one row even for no input, as
// Postgres does: counts 0, the other aggregates NULL. Past its Memory's
// budget, the rows of groups it does not hold go to spill files by hash
// of their key, aggregated after the groups in memory (aggspill.go): the
// groups then come out in no particular order.
type Aggregate struct {
	input   Operator
	columns []AggColumn
	scalar  bool
	format  func(int) Format
	groups  map[string]*group
	order   []*group
	next    int
	done    bool
	mem     *Memory
	spill   aggSpill
}

type group struct {
	keys [][]byte // the key columns' values, by column (nil elsewhere)
	accs []accumulator
}

// accumulator is one aggregate column's running value in a group.
type accumulator struct {
	seen     bool // a non-NULL partial was added
	n        int64
	b        bool
	raw      []byte // Min, Max: the best partial as encoded
	num      pgtype.Numeric
	nan      bool
	pos, neg bool // SumNumeric: +Infinity, -Infinity seen
}

func NewAggregate(input Operator, columns []AggColumn, scalar bool, format func(int) Format) *Aggregate {
	return &Aggregate{input: input, columns: columns, scalar: scalar, format: format, groups: map[string]*group{}}
}

func (a *Aggregate) Next() (Row, bool, error) {
	if !a.done {
		a.done = true
		var err error
		if dErr := Drain(a.input, func(r Row) {
			if err == nil {
				err = a.add(r)
			}
		}); dErr != nil {
			return Row{}, false, dErr
		}
		if err != nil {
			return Row{}, false, err
		}
		if a.scalar && len(a.order) == 0 {
			a.order = append(a.order, &group{keys: make([][]byte, len(a.columns)), accs: make([]accumulator, len(a.columns))})
		}
	}
	if a.next >= len(a.order) {
		return a.nextSpilled()
	}
	g := a.order[a.next]
	a.next++
	a.emitted()
	values, err := a.finish(g)
	if err != nil {
		return Row{}, false, err
	}
	return Row{Msg: encodeDataRow(values), Values: values}, true, nil
}

// add folds one partial row into its group.
func (a *Aggregate) add(r Row) error {
	if len(r.Values) != len(a.columns) {
		return fmt.Errorf("a partial row of %d columns, expected %d", len(r.Values), len(a.columns))
	}
	var key []byte
	for i, c := range a.columns {
		if c.Func != GroupKey {
			continue
		}
		v := r.Values[i]
		if v == nil {
			key = binary.BigEndian.AppendUint32(key, 0xFFFFFFFF)
			continue
		}
		key = binary.BigEndian.AppendUint32(key, uint32(len(v)))
		key = append(key, v...)
	}
	g := a.groups[string(key)]
	if g == nil {
		if spilled, err := a.spillRow(key, r); spilled || err != nil {
			return err
		}
		g = &group{keys: make([][]byte, len(a.columns)), accs: make([]accumulator, len(a.columns))}
		for i, c := range a.columns {
			if c.Func == GroupKey && r.Values[i] != nil {
				// A copy: the row's buffer holds other rows too.
				g.keys[i] = append(make([]byte, 0, len(r.Values[i])), r.Values[i]...)
			}
		}
		a.groups[string(key)] = g
		a.order = append(a.order, g)
	}
	for i, c := range a.columns {
		if v := r.Values[i]; v != nil && c.Func != GroupKey {
			if err := g.accs[i].add(c, v, a.format(i)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (acc *accumulator) add(c AggColumn, v []byte, format Format) error {
	first := !acc.seen
	acc.seen = true
	switch c.Func {
	case SumCounts, SumInt8:
		n, err := readInt(v, format)
		if err != nil {
			return err
		}
		sum := acc.n + n
		if (sum > acc.n) != (n > 0) {
			return pgerr.New(pgerr.NumericValueOutOfRange, "bigint out of range")
		}
		acc.n = sum
	case SumNumeric:
		n, err := readNumeric(v, format)
		if err != nil {
			return err
		}
		switch {
		case n.NaN:
			acc.nan = true
		case n.InfinityModifier == pgtype.Infinity:
			acc.pos = true
		case n.InfinityModifier == pgtype.NegativeInfinity:
			acc.neg = true
		case first || acc.num.Int == nil:
			acc.num = n
		default:
			acc.num = addNumeric(acc.num, n)
		}
	case Any:
		if first {
			acc.raw = copyValue(acc.raw, v)
		}
	case Avg:
		// Computed from other columns at the end.
	case Min, Max:
		if first {
			acc.raw = copyValue(acc.raw, v)
			return nil
		}
		cmp, err := compareValues(v, acc.raw, c.Type, format)
		if err != nil {
			return err
		}
		if c.Func == Min && cmp < 0 || c.Func == Max && cmp > 0 {
			acc.raw = copyValue(acc.raw, v)
		}
	case BoolAnd, BoolOr:
		b, err := readBool(v, format)
		if err != nil {
			return err
		}
		switch {
		case first:
			acc.b = b
		case c.Func == BoolAnd:
			acc.b = acc.b && b
		default:
			acc.b = acc.b || b
		}
	}
	return nil
}

// copyValue copies a non-NULL value into dst's storage: the row's buffer
// holds other rows too. An empty value stays non-nil, because nil is NULL.
func copyValue(dst, v []byte) []byte {
	if dst == nil {
		dst = make([]byte, 0, len(v))
	}
	return append(dst[:0], v...)
}

// finish writes a group's output row.
func (a *Aggregate) finish(g *group) ([][]byte, error) {
	values := make([][]byte, len(a.columns))
	for i, c := range a.columns {
		acc, format := &g.accs[i], a.format(i)
		switch {
		case c.Func == GroupKey:
			values[i] = g.keys[i]
		case c.Func == SumCounts:
			values[i] = writeInt8(acc.n, format)
		case c.Func == Avg:
			v, err := finishAvg(&g.accs[c.Sum], &g.accs[c.Count], format)
			if err != nil {
				return nil, err
			}
			values[i] = v
		case !acc.seen:
			// NULL: no row had a value.
		case c.Func == SumInt8:
			values[i] = writeInt8(acc.n, format)
		case c.Func == SumNumeric:
			v, err := writeNumeric(acc.sum(), format)
			if err != nil {
				return nil, err
			}
			values[i] = v
		case c.Func == Min || c.Func == Max || c.Func == Any:
			values[i] = acc.raw
		case c.Func == BoolAnd || c.Func == BoolOr:
			values[i] = writeBool(acc.b, format)
		}
	}
	return values, nil
}

// sum is a SumNumeric accumulator's value: NaN and the infinities as
// Postgres's numeric sum has them.
func (acc *accumulator) sum() pgtype.Numeric {
	switch {
	case acc.nan || acc.pos && acc.neg:
		return pgtype.Numeric{NaN: true, Valid: true}
	case acc.pos:
		return pgtype.Numeric{InfinityModifier: pgtype.Infinity, Valid: true}
	case acc.neg:
		return pgtype.Numeric{InfinityModifier: pgtype.NegativeInfinity, Valid: true}
	}
	return acc.num
}

// finishAvg is avg from a group's sum and count accumulators: NULL for
// no rows; NaN and the infinities pass through the division as they do
// in numeric_div.
func finishAvg(sum, count *accumulator, format Format) ([]byte, error) {
	if count.n == 0 || !sum.seen {
		return nil, nil
	}
	n := sum.sum()
	if !n.NaN && n.InfinityModifier == pgtype.Finite {
		n = divideNumeric(n, count.n)
	}
	return writeNumeric(n, format)
}

func errNoColumn(column int) error {
	return fmt.Errorf("a row has no column %d", column+1)
}
