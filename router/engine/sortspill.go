package engine

import "sort"

// maxRuns is how many sorted runs one merge reads at once; more are
// merged in passes, the first maxRuns into one run at a time, so a sort
// holds at most this many read buffers.
const maxRuns = 64

// sorted reads the Sort's whole input and returns it in order: an
// external merge sort. Rows are held while the budget allows; past it,
// the rows in hand are sorted and written to a spill file (a run), and
// the runs, then the rows left in memory, are merged k-way. Runs hold
// input in order and the merge takes equal rows from the earlier run
// first, so the sort stays stable.
func (s *Sort) sorted() (Operator, error) {
	var runs []*spillFile
	var held int64
	for {
		r, ok, err := s.input.Next()
		if err != nil {
			return nil, err
		}
		if !ok {
			break
		}
		size := rowSize(r)
		if !s.mem.grow(size) {
			if len(s.rows) > 0 {
				run, err := s.writeRun()
				if err != nil {
					return nil, err
				}
				runs = append(runs, run)
				s.mem.shrink(held)
				held = 0
			}
			if !s.mem.grow(size) {
				s.mem.force(size) // one row is always held
			}
		}
		held += size
		s.rows = append(s.rows, r)
	}
	if err := s.sortRows(); err != nil {
		return nil, err
	}
	if len(runs) == 0 {
		return &rowList{rows: s.rows}, nil
	}
	for len(runs) > maxRuns {
		merged, err := s.mergeRuns(runs[:maxRuns])
		if err != nil {
			return nil, err
		}
		runs = append([]*spillFile{merged}, runs[maxRuns:]...)
	}
	inputs := make([]Operator, 0, len(runs)+1)
	for _, run := range runs {
		rd, err := run.rows()
		if err != nil {
			return nil, err
		}
		inputs = append(inputs, rd)
	}
	inputs = append(inputs, &rowList{rows: s.rows})
	return NewMerge(inputs, s.ord.keys, s.ord.format), nil
}

func (s *Sort) sortRows() error {
	sort.SliceStable(s.rows, func(i, j int) bool { return s.ord.compare(s.rows[i], s.rows[j]) < 0 })
	return s.ord.err
}

// writeRun sorts the rows in hand and writes them to a new run, then
// lets them go.
func (s *Sort) writeRun() (*spillFile, error) {
	if err := s.sortRows(); err != nil {
		return nil, err
	}
	run, err := s.mem.newSpillFile()
	if err != nil {
		return nil, err
	}
	for _, r := range s.rows {
		if err := run.write(r.Msg); err != nil {
			return nil, err
		}
	}
	clear(s.rows) // the rows' buffers may go
	s.rows = s.rows[:0]
	return run, nil
}

// mergeRuns merges runs into one new run and frees them.
func (s *Sort) mergeRuns(runs []*spillFile) (*spillFile, error) {
	inputs := make([]Operator, len(runs))
	for i, run := range runs {
		rd, err := run.rows()
		if err != nil {
			return nil, err
		}
		inputs[i] = rd
	}
	out, err := s.mem.newSpillFile()
	if err != nil {
		return nil, err
	}
	var werr error
	if err := Drain(NewMerge(inputs, s.ord.keys, s.ord.format), func(r Row) {
		if werr == nil {
			werr = out.write(r.Msg)
		}
	}); err != nil {
		return nil, err
	}
	if werr != nil {
		return nil, werr
	}
	for _, run := range runs {
		run.close()
	}
	return out, nil
}

// rowList passes on rows held in memory.
type rowList struct {
	rows []Row
	next int
}

func (l *rowList) Next() (Row, bool, error) {
	if l.next >= len(l.rows) {
		return Row{}, false, nil
	}
	r := l.rows[l.next]
	l.rows[l.next] = Row{} // passed on: its buffer is the consumer's now
	l.next++
	return r, true, nil
}
