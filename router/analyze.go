package router

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/router/engine"
	"github.com/tesseradb/tessera/router/planner"
)

// EXPLAIN (TESSERA, ANALYZE) stmt runs the read it explains as the
// client's statement would run (its rows kept from the client) and
// answers the plan's lines with what happened: the rows and time the
// whole statement gave, and each shard's rows, time and calls, measured
// where the router talks to the shard's sidecar, and each operator the
// router runs between the shards and the client (engine.OperatorStats):
// the rows it returned and the time spent in it and below it, the
// shards' answers included. A write is refused (0A000): analyzing it
// would perform it.

// analysis collects each shard's part of a statement under analysis.
type analysis struct {
	mu     sync.Mutex
	shards map[string]*shardAnalysis
	// operators: the router's operators, the root first, once they ran.
	operators []*engine.OperatorStats
}

// addOperators records the operators of a plan the statement ran.
func (a *analysis) addOperators(stats []*engine.OperatorStats) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.operators = append(a.operators, stats...)
}

type shardAnalysis struct {
	rows, calls int64
	time        time.Duration
}

// add records one call to shard: the DataRows it answered, and how long
// it took.
func (a *analysis) add(shard string, rows int64, d time.Duration) {
	if a == nil {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	s := a.shards[shard]
	if s == nil {
		s = &shardAnalysis{}
		a.shards[shard] = s
	}
	s.rows += rows
	s.calls++
	s.time += d
}

// countRows counts the DataRows among whole messages.
func countRows(chunk []byte) int64 {
	var n int64
	pgwire.Messages(chunk, func(typ byte, _ []byte) error {
		if typ == 'D' {
			n++
		}
		return nil
	})
	return n
}

// explainAnalyze answers EXPLAIN (TESSERA, ANALYZE) of st (an
// ExplainTessera statement) into c.out.
func (c *clientConn) explainAnalyze(ctx context.Context, st *plannedStmt, lines []string) (bool, error) {
	inner := st.Inner
	if inner == nil || inner.Kind != planner.Select || !inner.ReadOnly {
		c.out = appendError(c.out, "ERROR", pgerr.New(pgerr.FeatureNotSupported,
			"EXPLAIN (TESSERA, ANALYZE) of anything but a read is not supported yet: it would run the statement"))
		c.failTx()
		return true, nil
	}
	an := &analysis{shards: map[string]*shardAnalysis{}}
	c.analyzing = an
	start := time.Now()
	res, err := c.captureStatement(ctx, inner, 0) // rows counted, none kept
	elapsed := time.Since(start)
	c.analyzing = nil
	if err != nil {
		c.out = appendError(c.out, "ERROR", err)
		c.failTx()
		return true, nil
	}
	if res.failed {
		c.out = append(c.out, res.answer...)
		return true, nil
	}
	lines = append(lines, fmt.Sprintf("Actual: %d rows in %.3f ms", res.rowCount, float64(elapsed.Microseconds())/1000))
	an.mu.Lock()
	defer an.mu.Unlock()
	for _, op := range an.operators {
		lines = append(lines, fmt.Sprintf("  %s -> %d rows in %.3f ms", op.Name, op.Rows, float64(op.Time.Microseconds())/1000))
	}
	names := make([]string, 0, len(an.shards))
	for name := range an.shards {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		s := an.shards[name]
		lines = append(lines, fmt.Sprintf("  Shard %s: %d rows in %.3f ms (%d calls)", name, s.rows, float64(s.time.Microseconds())/1000, s.calls))
	}
	c.out = appendRowDescription(c.out, "QUERY PLAN")
	for _, line := range lines {
		c.out = appendDataRow(c.out, line)
	}
	c.out = appendCommandComplete(c.out, "EXPLAIN")
	return false, nil
}
