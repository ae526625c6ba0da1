package engine

import "fmt"

// Condition compares an integer output column with a constant: one term
// of a HAVING the router evaluates over the final aggregates.
type Condition struct {
	Column int
	Op     string // =, <>, <, <=, >, >=
	Value  int64
}

func (c Condition) String() string { return fmt.Sprintf("$%d %s %d", c.Column+1, c.Op, c.Value) }

// Filter passes on the rows for which every condition holds. A NULL
// value makes its condition unknown, and HAVING drops the row, as
// Postgres does.
type Filter struct {
	input  Operator
	conds  []Condition
	format func(int) Format
}

func NewFilter(input Operator, conds []Condition, format func(int) Format) *Filter {
	return &Filter{input: input, conds: conds, format: format}
}

func (f *Filter) Next() (Row, bool, error) {
	for {
		r, ok, err := f.input.Next()
		if err != nil || !ok {
			return r, ok, err
		}
		keep, err := f.holds(r)
		if err != nil {
			return Row{}, false, err
		}
		if keep {
			return r, true, nil
		}
	}
}

func (f *Filter) holds(r Row) (bool, error) {
	for _, c := range f.conds {
		if c.Column >= len(r.Values) {
			return false, errNoColumn(c.Column)
		}
		v := r.Values[c.Column]
		if v == nil {
			return false, nil
		}
		n, err := readInt(v, f.format(c.Column))
		if err != nil {
			return false, err
		}
		var ok bool
		switch c.Op {
		case "=":
			ok = n == c.Value
		case "<>":
			ok = n != c.Value
		case "<":
			ok = n < c.Value
		case "<=":
			ok = n <= c.Value
		case ">":
			ok = n > c.Value
		case ">=":
			ok = n >= c.Value
		default:
			return false, fmt.Errorf("no operator %q", c.Op)
		}
		if !ok {
			return false, nil
		}
	}
	return true, nil
}
