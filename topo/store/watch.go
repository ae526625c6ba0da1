package store

import (
	"context"
	"fmt"
	"sync/atomic"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// problemBuffer is how many unread problems a Watcher keeps.
const problemBuffer = 16

// Watcher keeps the stored topology in memory as an immutable Snapshot,
// following every change in etcd.
//
// WatchTopology starts one goroutine, which the Watcher owns; it stops when
// Close is called, when the context given to WatchTopology ends, or when
// the etcd client is closed. A stored document that does not parse is
// skipped: the last good snapshot stays current, and the problem is sent on
// Problems. A broken watch (etcd compacted past it, lost its leader) is
// recovered by reading the document again and watching on from there.
type Watcher struct {
	key      string
	cur      atomic.Pointer[Snapshot]
	first    chan struct{} // closed when the first snapshot is published
	problems chan error
	cancel   context.CancelFunc
	done     chan struct{} // closed when the goroutine has stopped
}

// WatchTopology reads the topology and returns a Watcher that keeps it
// current until ctx ends or Close is called. It fails only if etcd cannot
// be read; a missing or invalid document leaves Current nil until a valid
// one is stored.
func (s *Store) WatchTopology(ctx context.Context) (*Watcher, error) {
	key := s.TopologyKey()
	resp, err := s.cli.Get(ctx, key)
	if err != nil {
		return nil, fmt.Errorf("reading topology: %w", err)
	}
	ctx, cancel := context.WithCancel(ctx)
	w := &Watcher{
		key:      key,
		first:    make(chan struct{}),
		problems: make(chan error, problemBuffer),
		cancel:   cancel,
		done:     make(chan struct{}),
	}
	w.reset(resp)
	go func() {
		defer close(w.done)
		defer close(w.problems)
		follow(ctx, s.cli, key, nil, resp.Header.Revision+1, follower{reset: w.reset, apply: w.apply, problem: w.report})
	}()
	return w, nil
}

// Current returns the newest valid topology, or nil while none has been
// stored. It never blocks or locks: it is on every routed query's path.
func (w *Watcher) Current() *Snapshot { return w.cur.Load() }

// WaitForRevision returns the first snapshot at revision rev or later,
// waiting for it if need be. It fails when ctx ends or the Watcher stops.
func (w *Watcher) WaitForRevision(ctx context.Context, rev int64) (*Snapshot, error) {
	for {
		s := w.cur.Load()
		if s != nil && s.Revision >= rev {
			return s, nil
		}
		next := w.first
		if s != nil {
			next = s.superseded
		}
		select {
		case <-next:
		case <-w.done:
			// The goroutine publishes before it stops, so look once more.
			if s := w.cur.Load(); s != nil && s.Revision >= rev {
				return s, nil
			}
			return nil, ErrClosed
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// Problems returns a channel of the things the Watcher skipped or is
// retrying: an invalid stored document (an *InvalidTopologyError), a
// deleted document, a failed watch or read. Nothing need read it; it keeps
// the latest problemBuffer problems, dropping older ones. It is closed when
// the Watcher stops.
func (w *Watcher) Problems() <-chan error { return w.problems }

// Close stops the Watcher and waits for its goroutine to end. Current
// keeps returning the last snapshot.
func (w *Watcher) Close() {
	w.cancel()
	<-w.done
}

// reset adopts the document of a fresh read, unless it is the one in use.
func (w *Watcher) reset(resp *clientv3.GetResponse) {
	cur := w.cur.Load()
	switch {
	case len(resp.Kvs) == 0:
		w.deleted()
	case cur == nil || cur.modRevision != resp.Kvs[0].ModRevision:
		w.adopt(resp.Kvs[0])
	}
}

// deleted reports that the document is gone. The snapshot in use stays:
// routing on it beats refusing every query.
func (w *Watcher) deleted() {
	if cur := w.cur.Load(); cur != nil {
		w.report(fmt.Errorf("topology %s has been deleted; keeping revision %d", w.key, cur.Revision))
	}
}

// apply adopts each written document in turn.
func (w *Watcher) apply(events []*clientv3.Event) {
	for _, ev := range events {
		if ev.Type == mvccpb.DELETE {
			w.deleted()
		} else {
			w.adopt(ev.Kv)
		}
	}
}

// adopt publishes kv's document as the current snapshot, or reports why
// it cannot.
func (w *Watcher) adopt(kv *mvccpb.KeyValue) {
	next, err := decodeTopology(kv)
	if err != nil {
		if cur := w.cur.Load(); cur != nil {
			err = fmt.Errorf("%w; keeping revision %d", err, cur.Revision)
		}
		w.report(err)
		return
	}
	next.superseded = make(chan struct{})
	if prev := w.cur.Swap(next); prev != nil {
		close(prev.superseded)
	} else {
		close(w.first)
	}
}

// report queues a problem, dropping the oldest queued one if the buffer is
// full. Only one goroutine at a time sends, and readers only take, so once
// one is dropped the last send cannot block.
func (w *Watcher) report(err error) {
	select {
	case w.problems <- err:
		return
	default:
	}
	select {
	case <-w.problems:
	default:
	}
	w.problems <- err
}
