package e2e

import (
	"context"
	"encoding/base64"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// The client of the reshard-through-the-router test: writers that
// insert, update, delete and re-insert rows of three tables keyed by
// bigint, text and uuid (shardTables), through the router, each on keys
// of its own, and log what the router acknowledged.

// shardTable is one table of the resharded group: its key column is id,
// of keyType (bigint, integer, text or uuid); the other columns are text,
// often NULL, payload sometimes over 2 kB (TOASTed).
type shardTable struct{ name, keyType string }

var shardTables = []shardTable{{"accounts", "bigint"}, {"docs", "text"}, {"events", "uuid"}}

// shardTableDDL creates the tables on a shard.
func shardTableDDL() []string {
	var out []string
	for _, t := range shardTables {
		out = append(out, fmt.Sprintf("CREATE TABLE %s (id %s PRIMARY KEY, name text, note text, payload text)", t.name, t.keyType))
	}
	return out
}

// rowKey is a row of one of shardTables: the table's index and the key
// as Postgres prints it.
type rowKey struct {
	table int
	key   string
}

// rowValue is a row's non-key columns, nil for NULL.
type rowValue [3]*string

func (v rowValue) String() string {
	var parts []string
	for _, c := range v {
		switch {
		case c == nil:
			parts = append(parts, "NULL")
		case len(*c) > 40:
			parts = append(parts, fmt.Sprintf("%q…(%d bytes)", (*c)[:20], len(*c)))
		default:
			parts = append(parts, fmt.Sprintf("%q", *c))
		}
	}
	return "(" + strings.Join(parts, ", ") + ")"
}

// reshardClient is one writer. want holds what the router acknowledged
// for each key it wrote: a value, or a deleted key (ok false).
type reshardClient struct {
	id   int
	conn *pgx.Conn
	// tables are the tables it writes (shardTables unless told otherwise).
	tables []shardTable
	rng    *rand.Rand
	// hold keeps the writer from starting a statement while the test
	// reads the rows (the test takes it for writing).
	hold *sync.RWMutex

	mu   sync.Mutex
	want map[rowKey]rowValue
	gone map[rowKey]bool // deleted, acknowledged
	live [][]string      // per table, keys present
	dead [][]string      // per table, keys deleted
	next int64
	// uncertain keys had a statement fail: whether it committed is not
	// known, so they are not compared.
	uncertain map[rowKey]bool
	acked     int
	errs      []string
	// anomalies are acknowledged statements whose answer contradicts the
	// log: an UPDATE or DELETE of a live key that touched no row.
	anomalies []string
	lastAck   time.Time
	maxGap    time.Duration
}

func newReshardClient(id int, conn *pgx.Conn, hold *sync.RWMutex) *reshardClient {
	return newTablesClient(id, conn, hold, shardTables)
}

// newTablesClient is a writer of the given tables.
func newTablesClient(id int, conn *pgx.Conn, hold *sync.RWMutex, tables []shardTable) *reshardClient {
	return &reshardClient{id: id, conn: conn, hold: hold, rng: rand.New(rand.NewPCG(uint64(id), 14)), tables: tables,
		live: make([][]string, len(tables)), dead: make([][]string, len(tables)),
		want: map[rowKey]rowValue{}, gone: map[rowKey]bool{}, uncertain: map[rowKey]bool{}}
}

// key returns the client's n-th key of table t: its own key space.
func (c *reshardClient) key(t int, n int64) string {
	switch c.tables[t].keyType {
	case "bigint":
		return fmt.Sprint(int64(c.id+1)*1_000_000_000 + n)
	case "integer":
		// Below 2^31 for up to 20 writers, above any bulk seed of keys
		// 1..N under 100 million.
		return fmt.Sprint(int64(c.id+1)*100_000_000 + n)
	case "uuid":
		return fmt.Sprintf("%08x-0000-4000-8000-%012x", c.id+1, n)
	}
	return fmt.Sprintf("w%d-key-%d", c.id, n)
}

// value makes a row's columns: NULLs, and a payload over 2 kB one time
// in six.
func (c *reshardClient) value(tag string) rowValue {
	var v rowValue
	if c.rng.IntN(5) > 0 {
		s := fmt.Sprintf("%s-%d", tag, c.rng.IntN(1000))
		v[0] = &s
	}
	if c.rng.IntN(3) == 0 {
		s := "" // empty, not NULL
		if c.rng.IntN(2) == 0 {
			s = "note " + tag
		}
		v[1] = &s
	}
	v[2] = c.payload()
	return v
}

func (c *reshardClient) payload() *string {
	switch c.rng.IntN(6) {
	case 0:
		return nil
	case 1:
		b := make([]byte, 2400+c.rng.IntN(1600))
		for i := range b {
			b[i] = byte(c.rng.Uint32())
		}
		s := base64.StdEncoding.EncodeToString(b)
		return &s
	}
	s := fmt.Sprintf("p%d", c.rng.IntN(1_000_000))
	return &s
}

// seed adds n keys per table that the test loaded before the writers
// started, returning them per table.
func (c *reshardClient) seed(n int) [][][]any {
	rows := make([][][]any, len(c.tables))
	for t := range c.tables {
		for range n {
			k := c.key(t, c.next)
			c.next++
			v := c.value("seed")
			c.want[rowKey{t, k}] = v
			c.live[t] = append(c.live[t], k)
			rows[t] = append(rows[t], []any{k, v[0], v[1], v[2]})
		}
	}
	return rows
}

// run writes, as fast as the router answers, until ctx ends.
func (c *reshardClient) run(ctx context.Context) {
	c.mu.Lock()
	c.lastAck = time.Now()
	c.mu.Unlock()
	for ctx.Err() == nil {
		c.hold.RLock()
		c.step(ctx)
		c.hold.RUnlock()
	}
}

// step runs one statement: an insert of a new key, an update of a live
// key's columns (sometimes leaving the payload as it is, which pgoutput
// then sends as unchanged TOAST), a delete, or a re-insert of a deleted
// key.
func (c *reshardClient) step(ctx context.Context) {
	t := c.rng.IntN(len(c.tables))
	table := c.tables[t].name
	c.mu.Lock()
	nLive, nDead := len(c.live[t]), len(c.dead[t])
	c.mu.Unlock()
	op := c.rng.IntN(100)
	var (
		k       string
		v       rowValue
		sql     string
		args    []any
		deletes bool
		revive  bool
	)
	switch {
	case op < 35 || nLive < 10:
		k, v = c.key(t, c.next), c.value("new")
		c.next++
		sql, args = "INSERT INTO "+table+" (id, name, note, payload) VALUES ($1, $2, $3, $4)", []any{k, v[0], v[1], v[2]}
	case op < 50 && nDead > 0:
		k, v, revive = c.dead[t][c.rng.IntN(nDead)], c.value("again"), true
		sql, args = "INSERT INTO "+table+" (id, name, note, payload) VALUES ($1, $2, $3, $4)", []any{k, v[0], v[1], v[2]}
	case op < 80:
		k = c.live[t][c.rng.IntN(nLive)]
		c.mu.Lock()
		v = c.want[rowKey{t, k}]
		c.mu.Unlock()
		nv := c.value("upd")
		v[0], v[1] = nv[0], nv[1]
		sql, args = "UPDATE "+table+" SET name = $2, note = $3 WHERE id = $1", []any{k, v[0], v[1]}
		if c.rng.IntN(2) == 0 {
			v[2] = nv[2]
			sql, args = "UPDATE "+table+" SET name = $2, note = $3, payload = $4 WHERE id = $1", []any{k, v[0], v[1], v[2]}
		}
	default:
		k, deletes = c.live[t][c.rng.IntN(nLive)], true
		sql, args = "DELETE FROM "+table+" WHERE id = $1", []any{k}
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	tag, err := c.conn.Exec(sctx, sql, args...)
	cancel()
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	rk := rowKey{t, k}
	if err != nil {
		if ctx.Err() != nil {
			c.uncertain[rk] = true // cut off by the test's end, not refused
			return
		}
		c.uncertain[rk] = true
		c.errs = append(c.errs, fmt.Sprintf("%s %s: %v", table, k, err))
		time.Sleep(20 * time.Millisecond)
		return
	}
	if tag.RowsAffected() != 1 {
		c.anomalies = append(c.anomalies, fmt.Sprintf("%s on %s %s touched %d rows", strings.Fields(sql)[0], table, k, tag.RowsAffected()))
	}
	c.acked++
	c.maxGap = max(c.maxGap, now.Sub(c.lastAck))
	c.lastAck = now
	switch {
	case deletes:
		delete(c.want, rk)
		c.gone[rk] = true
		c.live[t] = remove(c.live[t], k)
		c.dead[t] = append(c.dead[t], k)
	case revive:
		c.want[rk] = v
		delete(c.gone, rk)
		c.dead[t] = remove(c.dead[t], k)
		c.live[t] = append(c.live[t], k)
	default:
		if _, ok := c.want[rk]; !ok {
			c.live[t] = append(c.live[t], k)
		}
		c.want[rk] = v
	}
}

func remove(keys []string, k string) []string {
	i := slices.Index(keys, k)
	keys[i] = keys[len(keys)-1]
	return keys[:len(keys)-1]
}

// resetGap starts measuring the longest gap between acknowledged writes
// afresh.
func (c *reshardClient) resetGap(at time.Time) {
	c.mu.Lock()
	c.lastAck, c.maxGap = at, 0
	c.mu.Unlock()
}

// gapSince returns the longest gap since resetGap, counting the one still
// open, and whether a write was acknowledged after t.
func (c *reshardClient) gapSince(t time.Time) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return max(c.maxGap, time.Since(c.lastAck)), c.lastAck.After(t)
}
