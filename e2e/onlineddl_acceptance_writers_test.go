package e2e

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// The acceptance run's writers (reshard clients on one integer-keyed
// table each), their pauses, and its bulk seed, copied straight into the
// shards.

// writerSet is reshardWriters clients writing one table through a router.
type writerSet struct {
	clients []*reshardClient
	cancel  context.CancelFunc
	wg      sync.WaitGroup
}

// startWriters seeds 200 keys of each writer into table (integer-keyed),
// each on the shard its key routes to, and starts the writers.
func (rc *reshardCluster) startWriters(t *testing.T, ctx context.Context, addr string, hold *sync.RWMutex, table string) *writerSet {
	t.Helper()
	ws := &writerSet{}
	var keys []int64
	var rows [][]any
	for i := range reshardWriters {
		c := newTablesClient(i, connectSimpleTo(t, ctx, addr), hold, []shardTable{{table, "integer"}})
		for _, r := range c.seed(200)[0] {
			k, _ := strconv.ParseInt(r[0].(string), 10, 64)
			keys = append(keys, k)
			rows = append(rows, append([]any{k}, r[1:]...))
		}
		ws.clients = append(ws.clients, c)
	}
	rc.copyRouted(t, ctx, table, keys, func(i int) []any { return rows[i] })
	writing, cancel := context.WithCancel(ctx)
	ws.cancel = cancel
	for _, c := range ws.clients {
		ws.wg.Add(1)
		go func() { defer ws.wg.Done(); c.run(writing) }()
	}
	t.Cleanup(func() { ws.stop() })
	return ws
}

// stop stops the writers and returns their acknowledged writes and errors.
func (ws *writerSet) stop() (acked int, errs []string) {
	ws.cancel()
	ws.wg.Wait()
	for _, c := range ws.clients {
		c.mu.Lock()
		acked += c.acked
		for _, e := range c.errs {
			errs = append(errs, fmt.Sprintf("writer %d: %s", c.id, e))
		}
		c.mu.Unlock()
	}
	return acked, errs
}

// pauseAround runs do under the writers and returns how long it took and
// each writer's longest gap between acknowledged writes from its start
// until every writer has had a write acknowledged after it returned.
func pauseAround(t *testing.T, clients []*reshardClient, do func()) ([]time.Duration, time.Duration) {
	t.Helper()
	asked := time.Now()
	for _, c := range clients {
		c.resetGap(asked)
	}
	do()
	returned := time.Now()
	gaps := make([]time.Duration, len(clients))
	eventually(t, time.Minute, "every writer writes afterwards", func() error {
		for i, c := range clients {
			gap, after := c.gapSince(returned)
			if !after {
				return fmt.Errorf("writer %d has no acknowledged write since", c.id)
			}
			gaps[i] = gap.Round(time.Millisecond)
		}
		return nil
	})
	return gaps, returned.Sub(asked)
}

// bulkRow is the bulk seed's row of key id: checkBulk recognises it.
func bulkRow(id int64) []any {
	return []any{id, fmt.Sprintf("bulk-%d", id), nil, fmt.Sprintf("payload-%d-%s", id, strings.Repeat("x", 40))}
}

// copyBulk copies keys 1..n (bulkRow) into table, each on the shard its
// key routes to, and returns how many rows each shard got.
func (rc *reshardCluster) copyBulk(t *testing.T, ctx context.Context, table string, n int64) map[string]int64 {
	t.Helper()
	keys := make([]int64, n)
	for i := range keys {
		keys[i] = int64(i) + 1
	}
	return rc.copyRouted(t, ctx, table, keys, func(i int) []any { return bulkRow(keys[i]) })
}

// copyRouted copies rows (id, name, note, payload) into table with COPY
// straight into the shards, all at once, each row on the shard its key
// routes to; row(i) is the row of keys[i].
func (rc *reshardCluster) copyRouted(t *testing.T, ctx context.Context, table string, keys []int64, row func(i int) []any) map[string]int64 {
	t.Helper()
	place := rc.top().Resolve("shop", "public", table)
	byShard := map[string][]int{}
	for i, k := range keys {
		_, s, err := place.RouteInt(k)
		if err != nil {
			t.Fatal(err)
		}
		byShard[s] = append(byShard[s], i)
	}
	conns := map[string]*pgx.Conn{}
	for s := range byShard {
		conns[s] = rc.direct(t, ctx, s)
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(byShard))
	counts := map[string]int64{}
	for s, idx := range byShard {
		counts[s] = int64(len(idx))
		wg.Add(1)
		go func() {
			defer wg.Done()
			next := 0
			_, err := conns[s].CopyFrom(ctx, pgx.Identifier{table}, []string{"id", "name", "note", "payload"}, pgx.CopyFromFunc(func() ([]any, error) {
				if next == len(idx) {
					return nil, nil
				}
				next++
				return row(idx[next-1]), nil
			}))
			if err != nil {
				errs <- fmt.Errorf("%s: %w", s, err)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if t.Failed() {
		t.FailNow()
	}
	return counts
}
