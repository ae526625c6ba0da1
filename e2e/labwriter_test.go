package e2e

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
)

// writeTimeout bounds each writer's statement: far longer than a
// failover, so that one reached means the statement hung.
const writeTimeout = time.Minute

// labWriter inserts rows through one router, one statement at a time,
// reconnecting after an error; it keeps the ids acknowledged and the
// longest time between two acknowledgements.
type labWriter struct {
	id     int
	router string
	addr   string

	mu     sync.Mutex
	ids    []int64
	failed int
	// timedOut counts statements that waited writeTimeout without an
	// answer: a router left waiting on a primary cut off by the network.
	timedOut int
	lastErr  error
	maxGap   time.Duration
}

func (w *labWriter) acked() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.ids)
}

func (w *labWriter) lastError() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.lastErr
}

func (w *labWriter) run(ctx context.Context, stop <-chan struct{}) {
	var conn *pgx.Conn
	defer func() {
		if conn != nil {
			conn.Close(context.Background())
		}
	}()
	last := time.Now()
	for seq := int64(1); ; seq++ {
		select {
		case <-stop:
			return
		case <-ctx.Done():
			return
		default:
		}
		if conn == nil {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			c, err := pgx.Connect(cctx, labDSN(w.addr))
			cancel()
			if err != nil {
				w.note(err)
				time.Sleep(100 * time.Millisecond)
				continue
			}
			conn = c
		}
		id := int64(w.id)*100_000_000 + seq
		sctx, cancel := context.WithTimeout(ctx, writeTimeout)
		_, err := conn.Exec(sctx, "INSERT INTO writes VALUES ($1, $2)", id, w.id)
		hung := sctx.Err() == context.DeadlineExceeded
		cancel()
		if err != nil {
			w.note(err)
			if hung {
				w.mu.Lock()
				w.timedOut++
				w.mu.Unlock()
			}
			conn.Close(context.Background())
			conn = nil
			time.Sleep(time.Duration(50+rand.IntN(50)) * time.Millisecond)
			continue
		}
		now := time.Now()
		w.mu.Lock()
		w.ids = append(w.ids, id)
		w.maxGap = max(w.maxGap, now.Sub(last))
		w.mu.Unlock()
		last = now
	}
}

func (w *labWriter) note(err error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.failed++
	w.lastErr = err
}
