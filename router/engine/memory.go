package engine

import (
	"sync/atomic"
)

// Memory accounts the bytes one query's operators hold (the rows a Sort
// keeps, the groups an Aggregate keeps) against the query's budget and
// the router's, and owns the query's spill files. An operator asks before
// it holds more (grow); refused, it spills to a file instead. A nil
// *Memory is no budget: everything is held in memory, nothing spills.
//
// The query's budget is shared out among the operators that may spill
// (share), as Postgres gives each sort and hash its work_mem, so that
// one cannot starve the next: an Aggregate feeding a Sort holds its
// groups while the Sort fills.
//
// One query's operators run on one goroutine: used needs no lock; the
// router's total is shared by every query and is atomic.
type Memory struct {
	limit int64
	used  int64
	// query is the query's Memory, for an operator's share; nil for the
	// query's own, which keeps the peak and the files.
	query  *Memory
	peak   int64
	router *RouterMemory
	spill  *SpillArea
	files  []*spillFile
}

// RouterMemory is what the queries of one router hold together, against
// the router's budget.
type RouterMemory struct {
	limit int64
	used  atomic.Int64
}

// NewRouterMemory returns a router's budget of limit bytes.
func NewRouterMemory(limit int64) *RouterMemory { return &RouterMemory{limit: limit} }

// Used is what the router's queries hold now.
func (r *RouterMemory) Used() int64 { return r.used.Load() }

// NewMemory returns a query's budget of limit bytes within the router's,
// spilling to area.
func NewMemory(limit int64, router *RouterMemory, area *SpillArea) *Memory {
	return &Memory{limit: limit, router: router, spill: area}
}

// share returns one of k equal shares of the query's budget, for one
// operator.
func (m *Memory) share(k int) *Memory {
	if m == nil {
		return nil
	}
	return &Memory{limit: m.limit / int64(max(k, 1)), query: m, router: m.router, spill: m.spill}
}

// grow reserves n bytes, or reports false, reserving nothing, when the
// query's or the router's budget would be passed.
func (m *Memory) grow(n int64) bool {
	if m == nil {
		return true
	}
	if m.used+n > m.limit {
		return false
	}
	if m.router != nil && m.router.used.Add(n) > m.router.limit {
		m.router.used.Add(-n)
		return false
	}
	m.add(n)
	return true
}

// force reserves n bytes whatever the budgets say: the one row or group
// an operator must hold to make progress.
func (m *Memory) force(n int64) {
	if m == nil {
		return
	}
	if m.router != nil {
		m.router.used.Add(n)
	}
	m.add(n)
}

func (m *Memory) add(n int64) {
	m.used += n
	if q := m.query; q != nil {
		q.used += n
		q.peak = max(q.peak, q.used)
	}
	m.peak = max(m.peak, m.used)
}

// shrink gives back n bytes an operator no longer holds.
func (m *Memory) shrink(n int64) {
	if m == nil || n == 0 {
		return
	}
	m.used -= n
	if m.query != nil {
		m.query.used -= n
	}
	if m.router != nil {
		m.router.used.Add(-n)
	}
}

// Peak is the most the query held at once.
func (m *Memory) Peak() int64 {
	if m == nil {
		return 0
	}
	return m.peak
}

// SpilledBytes is what the query wrote to spill files.
func (m *Memory) SpilledBytes() int64 {
	if m == nil {
		return 0
	}
	var n int64
	for _, f := range m.files {
		n += f.written
	}
	return n
}

// Close ends the query (on the query's Memory, not a share): what it still accounts goes back to the router
// and its spill files are closed (their names were removed when they
// were made, so closing them frees their space). Call it once the query
// ends, by completion, error or cancel.
func (m *Memory) Close() {
	if m == nil || m.query != nil {
		return
	}
	m.shrink(m.used)
	for _, f := range m.files {
		f.close()
	}
	m.files = nil
}

// rowSize estimates what holding a row costs: its message, its column
// slices and the Row itself.
func rowSize(r Row) int64 { return int64(len(r.Msg) + 24*len(r.Values) + 48) }
