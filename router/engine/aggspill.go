package engine

import "hash/maphash"

// aggPartitions is how many spill files an Aggregate past its budget
// spreads the rows of the groups it does not hold over.
const aggPartitions = 16

// aggSpill is an Aggregate's hash-partitioned spill, as Postgres's hash
// aggregation spills: once the budget refuses a new group, every row of
// a group not in memory is written to one of aggPartitions files by a
// hash of its key, so each group's rows all land in one file. The groups
// in memory are answered first; then each file is aggregated in turn by
// an Aggregate of its own under the same budget, which spills again,
// with another hash, if the file still holds too many groups. Each level
// holds at least one group, so the work ends.
type aggSpill struct {
	parts    []*spillFile // nil until the budget refused a group
	seed     maphash.Seed
	held     int64 // accounted for the groups in memory
	released bool  // the groups in memory were answered and let go
	cur      *Aggregate
	curFile  *spillFile
	nextPart int
}

// groupSize estimates what holding a group costs: its key in the map
// and in the group, and an accumulator per column.
func groupSize(key []byte, columns int) int64 {
	return int64(2*len(key) + 160 + 120*columns)
}

// spillRow reports whether r, the first row of a group not in memory,
// went to a spill file instead of making the group; when not, the
// group's memory is reserved.
func (a *Aggregate) spillRow(key []byte, r Row) (bool, error) {
	s := &a.spill
	if s.parts == nil {
		size := groupSize(key, len(a.columns))
		switch {
		case a.mem.grow(size):
		case len(a.order) == 0:
			a.mem.force(size) // one group is always held
		default:
			s.parts = make([]*spillFile, aggPartitions)
			s.seed = maphash.MakeSeed()
		}
		if s.parts == nil {
			s.held += size
			return false, nil
		}
	}
	p := maphash.Bytes(s.seed, key) % aggPartitions
	if s.parts[p] == nil {
		f, err := a.mem.newSpillFile()
		if err != nil {
			return true, err
		}
		s.parts[p] = f
	}
	return true, s.parts[p].write(r.Msg)
}

// nextSpilled answers the groups of the spill files, once those in
// memory are out.
func (a *Aggregate) nextSpilled() (Row, bool, error) {
	s := &a.spill
	if s.parts == nil {
		return Row{}, false, nil
	}
	if !s.released {
		s.released = true
		a.groups, a.order, a.next = nil, nil, 0
		a.mem.shrink(s.held)
		s.held = 0
	}
	for {
		if s.cur != nil {
			r, ok, err := s.cur.Next()
			if err != nil || ok {
				return r, ok, err
			}
			s.cur.release()
			s.curFile.close()
			s.cur, s.curFile = nil, nil
		}
		for s.nextPart < len(s.parts) && s.parts[s.nextPart] == nil {
			s.nextPart++
		}
		if s.nextPart >= len(s.parts) {
			return Row{}, false, nil
		}
		f := s.parts[s.nextPart]
		s.nextPart++
		rows, err := f.rows()
		if err != nil {
			return Row{}, false, err
		}
		s.cur = NewAggregate(rows, a.columns, false, a.format)
		s.cur.mem, s.curFile = a.mem, f
	}
}

// emitted lets the group just answered go, and its share of the memory
// with it, for the operators above: a Sort filling from an Aggregate
// takes what the Aggregate gives back.
func (a *Aggregate) emitted() {
	a.groups = nil // no more rows come to look groups up
	left := int64(len(a.order) - a.next + 1)
	a.order[a.next-1] = nil
	n := a.spill.held / left
	a.mem.shrink(n)
	a.spill.held -= n
}

// release gives back the memory of an Aggregate whose groups are all
// answered.
func (a *Aggregate) release() {
	a.groups, a.order = nil, nil
	a.mem.shrink(a.spill.held)
	a.spill.held = 0
}
