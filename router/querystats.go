package router

import (
	"encoding/binary"
	"hash/maphash"
	"math/bits"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Query insights: per database and normalized statement, what
// SELECT * FROM tessera.query_stats shows and
// SELECT tessera.reset_query_stats() clears (docs/operations.md). Kept in
// memory per router, bounded: when full, a new statement takes the place
// of the one called least.

// queryStats is sharded so that sessions on different statements rarely
// wait for each other.
type queryStats struct {
	seed   maphash.Seed
	limit  int // entries per shard
	shards [16]queryStatsShard
}

type queryStatsShard struct {
	mu sync.Mutex
	// byDatabase maps database, then normalized text, to its entry: two
	// lookups by strings the session already has, no key to build.
	byDatabase map[string]map[string]*queryStat
	n          int
}

// queryStat is one normalized statement's figures. Latencies are kept in
// log-linear buckets (four per power of two), so p50 and p99 are within
// a quarter of the true value.
type queryStat struct {
	calls, rows, shardCalls, multiShardCalls int64
	total                                    time.Duration
	buckets                                  [latencyBuckets]uint32
}

const latencyBuckets = 64 * 4

func newQueryStats(size int) *queryStats {
	q := &queryStats{seed: maphash.MakeSeed(), limit: max(1, size/16)}
	for i := range q.shards {
		q.shards[i].byDatabase = map[string]map[string]*queryStat{}
	}
	return q
}

func (q *queryStats) record(database, text string, d time.Duration, rows int64, shards int) {
	sh := &q.shards[maphash.String(q.seed, text)%uint64(len(q.shards))]
	sh.mu.Lock()
	defer sh.mu.Unlock()
	texts := sh.byDatabase[database]
	e := texts[text]
	if e == nil {
		if sh.n >= q.limit {
			sh.evictLeastCalled()
		}
		if texts == nil {
			texts = map[string]*queryStat{}
			sh.byDatabase[database] = texts
		}
		e = &queryStat{}
		texts[text] = e
		sh.n++
	}
	e.calls++
	e.rows += rows
	e.total += d
	e.shardCalls += int64(shards)
	if shards > 1 {
		e.multiShardCalls++
	}
	e.buckets[latencyBucket(d)]++
}

func (sh *queryStatsShard) evictLeastCalled() {
	var db, text string
	var least int64 = -1
	for d, texts := range sh.byDatabase {
		for t, e := range texts {
			if least < 0 || e.calls < least {
				db, text, least = d, t, e.calls
			}
		}
	}
	if least >= 0 {
		delete(sh.byDatabase[db], text)
		if len(sh.byDatabase[db]) == 0 {
			delete(sh.byDatabase, db)
		}
		sh.n--
	}
}

// latencyBucket: four buckets per power of two of nanoseconds.
func latencyBucket(d time.Duration) int {
	ns := uint64(max(d, 1))
	b := bits.Len64(ns)
	if b < 3 {
		return int(ns)
	}
	i := b*4 + int(ns>>(b-3)&3)
	return min(i, latencyBuckets-1)
}

// bucketUpper is the largest latency bucket i holds.
func bucketUpper(i int) time.Duration {
	if i < 12 {
		return time.Duration(i)
	}
	b, sub := i/4, i%4
	return time.Duration((uint64(5+sub) << (b - 3)) - 1)
}

func (e *queryStat) percentile(p float64) time.Duration {
	want := uint64(float64(e.calls)*p + 0.5)
	want = max(want, 1)
	var seen uint64
	for i, n := range e.buckets {
		seen += uint64(n)
		if seen >= want {
			return bucketUpper(i)
		}
	}
	return 0
}

func (q *queryStats) len() int {
	n := 0
	for i := range q.shards {
		q.shards[i].mu.Lock()
		n += q.shards[i].n
		q.shards[i].mu.Unlock()
	}
	return n
}

func (q *queryStats) reset() {
	for i := range q.shards {
		sh := &q.shards[i]
		sh.mu.Lock()
		sh.byDatabase, sh.n = map[string]map[string]*queryStat{}, 0
		sh.mu.Unlock()
	}
}

// queryStatsColumns are tessera.query_stats's columns and their types.
var queryStatsColumns = []struct {
	name string
	oid  uint32
}{
	{"database", 25}, {"query", 25}, {"calls", 20}, {"total_ms", 701}, {"mean_ms", 701},
	{"p50_ms", 701}, {"p99_ms", 701}, {"rows", 20}, {"shard_calls", 20},
	{"multi_shard_calls", 20}, {"multi_shard", 16},
}

// rows returns the view's rows as text, the most total time first.
func (q *queryStats) rows() [][]string {
	type row struct {
		total time.Duration
		vals  []string
	}
	var out []row
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 3, 64) }
	for i := range q.shards {
		sh := &q.shards[i]
		sh.mu.Lock()
		for db, texts := range sh.byDatabase {
			for text, e := range texts {
				out = append(out, row{e.total, []string{db, text, strconv.FormatInt(e.calls, 10), ms(e.total),
					ms(e.total / time.Duration(max(e.calls, 1))), ms(e.percentile(0.5)), ms(e.percentile(0.99)),
					strconv.FormatInt(e.rows, 10), strconv.FormatInt(e.shardCalls, 10),
					strconv.FormatInt(e.multiShardCalls, 10), strconv.FormatBool(e.multiShardCalls > 0)[:1]}})
			}
		}
		sh.mu.Unlock()
	}
	slices.SortFunc(out, func(a, b row) int { return int(b.total - a.total) })
	rows := make([][]string, len(out))
	for i, r := range out {
		rows[i] = r.vals
	}
	return rows
}

// insightsCommand answers the two query-insights statements, sent by the
// simple protocol exactly so (any case and spacing, an optional
// semicolon); true: answered.
func (c *clientConn) insightsCommand(msg []byte) bool {
	if len(msg) > 80 || !containsFold(msg, "tessera.") {
		return false
	}
	sql := strings.Join(strings.Fields(strings.ToLower(strings.TrimRight(string(msg[5:len(msg)-1]), "; \t\r\n"))), " ")
	switch sql {
	case "select * from tessera.query_stats":
		var desc []byte
		desc = binary.BigEndian.AppendUint16(desc, uint16(len(queryStatsColumns)))
		for _, col := range queryStatsColumns {
			desc = appendColumn(desc, col.name, col.oid)
		}
		c.out = appendMsg(c.out, 'T', desc)
		rows := c.srv.queryStats.rows()
		for _, r := range rows {
			c.out = appendDataRow(c.out, r...)
		}
		c.out = appendCommandComplete(c.out, "SELECT "+strconv.Itoa(len(rows)))
	case "select tessera.reset_query_stats()":
		c.srv.queryStats.reset()
		var desc []byte
		desc = binary.BigEndian.AppendUint16(desc, 1)
		desc = appendColumn(desc, "reset_query_stats", 2278) // void
		c.out = appendMsg(c.out, 'T', desc)
		c.out = appendDataRow(c.out, "")
		c.out = appendCommandComplete(c.out, "SELECT 1")
	default:
		return false
	}
	c.stat.insights = true
	c.out = appendReady(c.out, c.status())
	return true
}

// appendColumn appends one RowDescription field of a text-format column.
func appendColumn(b []byte, name string, oid uint32) []byte {
	b = append(b, name...)
	b = append(b, 0)
	b = binary.BigEndian.AppendUint32(b, 0) // table oid
	b = binary.BigEndian.AppendUint16(b, 0) // column
	b = binary.BigEndian.AppendUint32(b, oid)
	size := uint16(0xffff)
	switch oid {
	case 20, 701:
		size = 8
	case 16:
		size = 1
	case 2278:
		size = 4
	}
	b = binary.BigEndian.AppendUint16(b, size)
	b = binary.BigEndian.AppendUint32(b, 0xffffffff)
	return binary.BigEndian.AppendUint16(b, 0) // text format
}

// containsFold reports whether b holds the lower-case ASCII word, in any
// case, without allocating: it runs on every short Query.
func containsFold(b []byte, word string) bool {
	for i := 0; i+len(word) <= len(b); i++ {
		j := 0
		for ; j < len(word); j++ {
			if b[i+j]|0x20 != word[j] && b[i+j] != word[j] {
				break
			}
		}
		if j == len(word) {
			return true
		}
	}
	return false
}
