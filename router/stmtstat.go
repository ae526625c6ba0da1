package router

import (
	"bytes"
	"encoding/binary"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tesseradb/tessera/router/planner"
)

// stmtStat accounts for the statement a session is serving, for the
// metrics and tessera.query_stats: it is filled by small hooks (the
// planner's result, Bind, each run on a shard, what the client is sent)
// and reported when the statement ends at its
// ReadyForQuery (the end of a Query, or a Sync).
type stmtStat struct {
	start time.Time
	kind  planner.Kind
	// text is the first prepared statement the batch bound; a Query's
	// own text is used instead.
	text      string
	shards    int
	lastShard string
	// rows sums the row counts of the CommandComplete tags the client
	// was sent.
	rows     int64
	sqlstate string // of the first error
	// executed: the batch had an Execute (a Sync after only Parse and
	// Describe is a round trip, not a statement); insights: the
	// statement read or reset the insights, which it does not count in.
	executed, insights bool

	// Per session: the database's counters, normalized Query texts, and
	// how much of the router's queued messages (clientConn.out) a
	// statement that ended has counted already.
	counters   *[kindCount]prometheus.Counter
	memo       map[string]string
	outScanned int
}

// unnormalizedText stands in tessera.query_stats for every statement whose
// text the plan cache's scanner does not model.
const unnormalizedText = "<statement not normalized>"

// memoSize bounds a session's memo of normalized Query texts.
const memoSize = 256

// statementBegins marks when the first message of a statement arrived,
// and an Execute in it.
func (c *clientConn) statementBegins(typ byte) {
	if c.stat.start.IsZero() {
		c.stat.start = time.Now()
	}
	if typ == 'E' {
		c.stat.executed = true
	}
}

// planned notes the kind of a statement's first planned statement.
func (st *stmtStat) planned(stmts []*plannedStmt) {
	if st.kind == 0 && len(stmts) > 0 {
		st.kind = stmts[0].Kind
	}
}

// bound notes the first prepared statement a batch binds.
func (st *stmtStat) bound(p *prepared) {
	if st.kind == 0 && p.stmt != nil {
		st.kind = p.stmt.Kind
	}
	if st.text == "" {
		st.text = p.sql
	}
}

// ranOn counts the shards a statement runs on.
func (st *stmtStat) ranOn(shard string) {
	if shard != st.lastShard || st.shards == 0 {
		st.shards++
		st.lastShard = shard
	}
}

// scan reads the row counts and the first SQLSTATE of what the client is
// sent (whole messages: the shards' answers are chunked by message, and
// the router composes whole ones).
func (st *stmtStat) scan(b []byte) {
	for len(b) >= 5 {
		n := int(binary.BigEndian.Uint32(b[1:5]))
		if n < 4 || len(b) < 1+n {
			return
		}
		switch b[0] {
		case 'C':
			if rows, ok := tagRows(b[5 : 1+n]); ok {
				st.rows += rows
			}
		case 'E':
			if st.sqlstate == "" {
				st.sqlstate = errorCode(b[5 : 1+n])
			}
		}
		b = b[1+n:]
	}
}

// scanComposed scans the router's queued messages as they go to the
// client, but for what the statement that ended before counted.
func (st *stmtStat) scanComposed(out []byte) {
	st.scan(out[min(st.outScanned, len(out)):])
	st.outScanned = 0
}

// tagRows reads the row count of a CommandComplete tag that has one.
func tagRows(body []byte) (int64, bool) {
	body = bytes.TrimSuffix(body, []byte{0})
	sp := bytes.IndexByte(body, ' ')
	if sp < 0 {
		return 0, false
	}
	switch string(body[:sp]) {
	case "SELECT", "INSERT", "UPDATE", "DELETE", "MERGE", "COPY", "FETCH", "MOVE":
	default:
		return 0, false
	}
	last := bytes.LastIndexByte(body, ' ')
	var n int64
	for _, d := range body[last+1:] {
		if d < '0' || d > '9' {
			return 0, false
		}
		n = n*10 + int64(d-'0')
	}
	return n, true
}

// errorCode is the SQLSTATE field of an ErrorResponse body.
func errorCode(body []byte) string {
	for len(body) > 1 {
		end := bytes.IndexByte(body[1:], 0)
		if end < 0 {
			return ""
		}
		if body[0] == 'C' {
			return string(body[1 : 1+end])
		}
		body = body[2+end:]
	}
	return ""
}

// statementEnds reports the statement; query is the Query message's text
// when it was one.
func (c *clientConn) statementEnds(query []byte) {
	st := &c.stat
	if st.start.IsZero() || query == nil && !st.executed {
		*st = stmtStat{counters: st.counters, memo: st.memo, outScanned: st.outScanned}
		return
	}
	// What the router queued is sent at the next flush, after this.
	st.scan(c.out[min(st.outScanned, len(c.out)):])
	st.outScanned = len(c.out)
	elapsed := time.Since(st.start)
	m := c.srv.metrics
	if st.counters == nil {
		st.counters = m.forDatabase(c.database)
	}
	st.counters[st.kind].Inc()
	m.duration[st.kind].Observe(elapsed.Seconds())
	m.shards.Observe(float64(st.shards))
	if st.shards > 1 {
		m.scatters.Inc()
	}
	if st.sqlstate != "" {
		m.errors.WithLabelValues(st.sqlstate).Inc()
	}
	var text string
	if (query != nil || st.text != "") && !st.insights {
		text = c.normalized(query, st.text)
	}
	if text != "" {
		c.srv.queryStats.record(c.database, text, elapsed, st.rows, st.shards)
	}
	*st = stmtStat{counters: st.counters, memo: st.memo, outScanned: st.outScanned}
}

// normalized is a statement's text as query insights group it,
// remembered per session: a session tends to send the same few texts.
// A prepared statement's text is normalized too: a driver may send
// literals by the extended protocol.
func (c *clientConn) normalized(query []byte, prepared string) string {
	var s string
	var ok bool
	if query != nil {
		s, ok = c.stat.memo[string(query)]
	} else {
		s, ok = c.stat.memo[prepared]
	}
	if ok {
		return s
	}
	text := prepared
	if query != nil {
		text = string(query)
	}
	s, ok = planner.Normalize(text)
	if !ok {
		// Its literals could not be removed: kept under one text, so
		// that no value reaches the view.
		s = unnormalizedText
	}
	if c.stat.memo == nil || len(c.stat.memo) >= memoSize {
		c.stat.memo = map[string]string{}
	}
	c.stat.memo[text] = s
	return s
}
