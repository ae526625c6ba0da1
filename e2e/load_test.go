package e2e

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// writers insert rows through a router as fast as they can and keep what
// a client would see: which inserts were acknowledged, the errors, and
// when writes stopped and started succeeding again.
type writers struct {
	name string
	next atomic.Int64

	mu      sync.Mutex
	acked   []int64
	errs    []string
	codes   map[string]int        // SQLSTATE ("" for none: a client-side failure) -> count
	lastAck map[int]time.Time     // per writer
	maxGap  time.Duration         // longest stretch without an ack, over writers
	gapEnd  time.Time             // when maxGap ended
	gaps    map[int]time.Duration // longest stretch without an ack, per writer
	since   time.Time             // when the disturbance began (set by the test)

	stop chan struct{}
	wg   sync.WaitGroup
}

func ensureTable(t *testing.T, addr string) {
	t.Helper()
	if _, err := routerConn(t, addr).Exec(context.Background(), "CREATE TABLE IF NOT EXISTS ha_writes (id bigint PRIMARY KEY, via text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
}

// startWriters runs n writers through the router at addr; ids start at
// base so that several groups never collide.
func startWriters(t *testing.T, name, addr string, n int, base int64) *writers {
	t.Helper()
	w := &writers{name: name, lastAck: map[int]time.Time{}, gaps: map[int]time.Duration{}, codes: map[string]int{}, stop: make(chan struct{})}
	w.next.Store(base)
	for i := range n {
		conn := routerConn(t, addr)
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			w.loop(i, conn)
		}()
	}
	return w
}

func (w *writers) loop(i int, conn *pgx.Conn) {
	w.mu.Lock()
	w.lastAck[i] = time.Now()
	w.mu.Unlock()
	for {
		select {
		case <-w.stop:
			return
		default:
		}
		id := w.next.Add(1)
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err := conn.Exec(ctx, "INSERT INTO ha_writes VALUES ($1, $2)", id, w.name)
		cancel()
		now := time.Now()
		w.mu.Lock()
		if err != nil {
			w.errs = append(w.errs, fmt.Sprintf("%s (at %v)", err, now.Sub(w.since).Round(time.Millisecond)))
			var pe *pgconn.PgError
			code := ""
			if errors.As(err, &pe) {
				code = pe.Code
			}
			w.codes[code]++
			w.mu.Unlock()
			time.Sleep(20 * time.Millisecond) // a client would back off a little
			continue
		}
		w.acked = append(w.acked, id)
		if gap := now.Sub(w.lastAck[i]); gap > w.maxGap {
			w.maxGap, w.gapEnd = gap, now
		}
		w.gaps[i] = max(w.gaps[i], now.Sub(w.lastAck[i]))
		w.lastAck[i] = now
		w.mu.Unlock()
	}
}

// disturb marks the moment the disturbance begins.
func (w *writers) disturb(at time.Time) {
	w.mu.Lock()
	w.since = at
	w.maxGap = 0
	for i := range w.lastAck {
		w.lastAck[i] = at
		w.gaps[i] = 0
	}
	w.mu.Unlock()
}

// longestGap is the longest time any writer went without an
// acknowledged write since the disturbance began: how long writes were
// unavailable, in-flight statements included.
func (w *writers) longestGap() time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.maxGap
}

// longestGapEnd is when the longest gap since the disturbance began
// ended: the first acknowledged write after it.
func (w *writers) longestGapEnd() time.Time {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.gapEnd
}

// gapsByWriter is each writer's longest time without an acknowledged
// write since the disturbance began, in writer order.
func (w *writers) gapsByWriter() []time.Duration {
	w.mu.Lock()
	defer w.mu.Unlock()
	out := make([]time.Duration, len(w.lastAck))
	for i := range out {
		out[i] = w.gaps[i].Round(time.Millisecond)
	}
	return out
}

// ackedAfter reports whether every writer had a write acknowledged after t.
func (w *writers) ackedAfter(t time.Time) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, last := range w.lastAck {
		if !last.After(t) {
			return false
		}
	}
	return true
}

func (w *writers) finish() {
	close(w.stop)
	w.wg.Wait()
}

func (w *writers) String() string {
	w.mu.Lock()
	defer w.mu.Unlock()
	s := fmt.Sprintf("%s: %d acknowledged, %d errors, longest gap %v", w.name, len(w.acked), len(w.errs), w.maxGap.Round(time.Millisecond))
	if len(w.errs) > 0 {
		s += fmt.Sprintf("; SQLSTATEs %v; first error: %s; last: %s", w.codes, w.errs[0], w.errs[len(w.errs)-1])
	}
	return s
}

// checkAcknowledgedPresent fails unless every acknowledged insert is in
// the table, read through the router from the current primary.
func checkAcknowledgedPresent(t *testing.T, addr string, groups ...*writers) {
	t.Helper()
	for _, w := range groups {
		if missing := missingAcknowledged(t, addr, w); missing > 0 {
			t.Errorf("%s: %d of %d acknowledged writes are missing", w.name, missing, len(w.acked))
		}
	}
}

// missingAcknowledged counts w's acknowledged inserts that are not in the
// table, read through the router from the current primary.
func missingAcknowledged(t *testing.T, addr string, w *writers) int {
	t.Helper()
	rows, err := routerConn(t, addr).Query(context.Background(), "SELECT id FROM ha_writes")
	if err != nil {
		t.Fatal(err)
	}
	present := map[int64]bool{}
	for rows.Next() {
		var id int64
		if err := rows.Scan(&id); err != nil {
			t.Fatal(err)
		}
		present[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	missing := 0
	for _, id := range w.acked {
		if !present[id] {
			missing++
		}
	}
	return missing
}
