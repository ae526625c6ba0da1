package engine

// Project drops the last hidden columns of each row: the partial
// aggregates and sort keys the shards computed for the router, which the
// client's statement does not show.
type Project struct {
	input  Operator
	hidden int
}

func NewProject(input Operator, hidden int) *Project { return &Project{input: input, hidden: hidden} }

func (p *Project) Next() (Row, bool, error) {
	r, ok, err := p.input.Next()
	if err != nil || !ok {
		return r, ok, err
	}
	if len(r.Values) < p.hidden {
		return Row{}, false, errNoColumn(p.hidden - 1)
	}
	values := r.Values[: len(r.Values)-p.hidden : len(r.Values)-p.hidden]
	return Row{Msg: encodeDataRow(values), Values: values}, true, nil
}
