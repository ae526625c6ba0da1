package engine

import "container/heap"

// SortKey is one ORDER BY item over an output column (0-based).
type SortKey struct {
	Column     int
	Type       Type // Int or Bool: the types the engine orders
	Desc       bool
	NullsFirst bool
}

// orderer compares rows by keys under Postgres's rules: ASC puts NULLs
// last unless NULLS FIRST, DESC puts them first unless NULLS LAST. The
// first error it meets is kept and ends the operator using it.
type orderer struct {
	keys   []SortKey
	format func(column int) Format
	err    error
}

func (o *orderer) compare(a, b Row) int {
	for _, k := range o.keys {
		if k.Column >= len(a.Values) || k.Column >= len(b.Values) {
			o.fail(errNoColumn(k.Column))
			return 0
		}
		x, y := a.Values[k.Column], b.Values[k.Column]
		switch {
		case x == nil && y == nil:
			continue
		case x == nil:
			return nullOrder(k.NullsFirst)
		case y == nil:
			return -nullOrder(k.NullsFirst)
		}
		c, err := compareValues(x, y, k.Type, o.format(k.Column))
		if err != nil {
			o.fail(err)
			return 0
		}
		if k.Desc {
			c = -c
		}
		if c != 0 {
			return c
		}
	}
	return 0
}

func nullOrder(nullsFirst bool) int {
	if nullsFirst {
		return -1
	}
	return 1
}

func (o *orderer) fail(err error) {
	if o.err == nil {
		o.err = err
	}
}

// Merge merges inputs that are each sorted by the same keys, streaming:
// it holds one row of each input. Among rows with equal keys the earlier
// input's come first.
type Merge struct {
	inputs []Operator
	ord    orderer
	heads  mergeHeap
	primed bool
}

func NewMerge(inputs []Operator, keys []SortKey, format func(int) Format) *Merge {
	m := &Merge{inputs: inputs, ord: orderer{keys: keys, format: format}}
	m.heads.ord = &m.ord
	return m
}

type mergeHead struct {
	row   Row
	input int
}

type mergeHeap struct {
	items []mergeHead
	ord   *orderer
}

func (h *mergeHeap) Len() int { return len(h.items) }
func (h *mergeHeap) Less(i, j int) bool {
	c := h.ord.compare(h.items[i].row, h.items[j].row)
	return c < 0 || c == 0 && h.items[i].input < h.items[j].input
}
func (h *mergeHeap) Swap(i, j int) { h.items[i], h.items[j] = h.items[j], h.items[i] }
func (h *mergeHeap) Push(x any)    { h.items = append(h.items, x.(mergeHead)) }
func (h *mergeHeap) Pop() any {
	last := h.items[len(h.items)-1]
	h.items = h.items[:len(h.items)-1]
	return last
}

func (m *Merge) Next() (Row, bool, error) {
	if !m.primed {
		m.primed = true
		for i, in := range m.inputs {
			r, ok, err := in.Next()
			if err != nil {
				return Row{}, false, err
			}
			if ok {
				m.heads.items = append(m.heads.items, mergeHead{row: r, input: i})
			}
		}
		heap.Init(&m.heads)
	}
	if m.ord.err != nil {
		return Row{}, false, m.ord.err
	}
	if m.heads.Len() == 0 {
		return Row{}, false, nil
	}
	top := m.heads.items[0]
	r, ok, err := m.inputs[top.input].Next()
	switch {
	case err != nil:
		return Row{}, false, err
	case ok:
		m.heads.items[0].row = r
		heap.Fix(&m.heads, 0)
	default:
		heap.Pop(&m.heads)
	}
	return top.row, m.ord.err == nil, m.ord.err
}

// Sort reads all of its input and passes it on ordered by keys (stable:
// rows with equal keys keep their input order). Past its Memory's budget
// it sorts on disk (sortspill.go).
type Sort struct {
	input Operator
	ord   orderer
	mem   *Memory
	rows  []Row
	out   Operator
}

func NewSort(input Operator, keys []SortKey, format func(int) Format) *Sort {
	return &Sort{input: input, ord: orderer{keys: keys, format: format}}
}

func (s *Sort) Next() (Row, bool, error) {
	if s.out == nil {
		out, err := s.sorted()
		if err != nil {
			s.out = NewConcat()
			return Row{}, false, err
		}
		s.out = out
	}
	return s.out.Next()
}
