package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Registration keeps a process's Record in etcd while the process lives.
//
// The record is attached to a lease. Register starts one goroutine, owned
// by the Registration, that keeps the lease alive. If the lease is lost
// anyway (the process was cut off from etcd for longer than the TTL, so
// etcd expired the lease and deleted the record) the goroutine grants a new
// lease and writes the record again, retrying with backoff, so a process
// that was partitioned briefly reappears. The goroutine stops at Close or
// when the etcd client is closed. A process that dies without Close leaves
// its record to expire with the lease, about a TTL after the last
// keepalive.
type Registration struct {
	cli    *clientv3.Client
	key    string
	ttl    int64 // seconds
	cancel context.CancelFunc
	done   chan struct{} // closed when the goroutine has stopped

	mu    sync.Mutex // guards rec and lease, and orders writes of the record
	rec   Record
	lease clientv3.LeaseID
}

// Register writes rec under a lease of ttl (rounded up to whole seconds,
// at least one; etcd may raise it to its minimum) and keeps it there until
// Close. ctx bounds only the first write. A record of the same kind and id
// is replaced: a restarted process takes over its own id at once, without
// waiting for its old lease to expire. Started is set to now if zero.
func (s *Store) Register(ctx context.Context, rec Record, ttl time.Duration) (*Registration, error) {
	if err := rec.Check(); err != nil {
		return nil, err
	}
	if rec.Started.IsZero() {
		rec.Started = time.Now().UTC()
	}
	r := &Registration{
		cli:  s.cli,
		key:  s.RecordKey(rec.Kind, rec.ID),
		ttl:  max(int64(math.Ceil(ttl.Seconds())), 1),
		done: make(chan struct{}),
		rec:  rec,
	}
	// The keepalive outlives ctx, which bounds only this call; it lives
	// until Close or the client's end.
	kctx, cancel := context.WithCancel(s.cli.Ctx())
	lease, err := r.grant(ctx)
	if err != nil {
		cancel()
		return nil, err
	}
	ka, err := s.cli.KeepAlive(kctx, lease)
	if err != nil {
		cancel()
		s.cli.Revoke(ctx, lease) // best effort; the lease expires anyway
		return nil, fmt.Errorf("keeping %s alive: %w", r.key, err)
	}
	r.cancel = cancel
	go r.run(kctx, ka)
	return r, nil
}

// run keeps the lease alive, and replaces it whenever it is lost.
func (r *Registration) run(ctx context.Context, ka <-chan *clientv3.LeaseKeepAliveResponse) {
	defer close(r.done)
	for {
		for range ka {
			// The channel closes when the lease expires or can no longer
			// be renewed, or when ctx ends.
		}
		delay := minRetryDelay
		for {
			if ctx.Err() != nil {
				return
			}
			lease, err := r.grant(ctx)
			if err == nil {
				if ka, err = r.cli.KeepAlive(ctx, lease); err == nil {
					break
				}
			}
			if !sleep(ctx, delay) {
				return
			}
			delay = min(2*delay, maxRetryDelay)
		}
	}
}

// grant writes the record under a new lease, which becomes the
// registration's.
func (r *Registration) grant(ctx context.Context) (clientv3.LeaseID, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	lease, err := r.cli.Grant(ctx, r.ttl)
	if err != nil {
		return 0, fmt.Errorf("granting a lease for %s: %w", r.key, err)
	}
	if err := r.put(ctx, r.rec, lease.ID); err != nil {
		r.cli.Revoke(ctx, lease.ID) // best effort; the lease expires anyway
		return 0, err
	}
	r.lease = lease.ID
	return lease.ID, nil
}

func (r *Registration) put(ctx context.Context, rec Record, lease clientv3.LeaseID) error {
	doc, err := json.Marshal(rec)
	if err != nil {
		return fmt.Errorf("encoding %s: %w", r.key, err)
	}
	if _, err := r.cli.Put(ctx, r.key, string(doc), clientv3.WithLease(lease)); err != nil {
		return fmt.Errorf("writing %s: %w", r.key, err)
	}
	return nil
}

// Update rewrites the record under the same lease, to keep fields such as
// a sidecar's role current. Kind and ID cannot change; a zero Started keeps
// the registered one. If the lease has just been lost, the new record is
// written when the registration replaces the lease.
func (r *Registration) Update(ctx context.Context, rec Record) error {
	if err := rec.Check(); err != nil {
		return err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if rec.Kind != r.rec.Kind || rec.ID != r.rec.ID {
		return fmt.Errorf("cannot change registration %s/%s to %s/%s", r.rec.Kind, r.rec.ID, rec.Kind, rec.ID)
	}
	select {
	case <-r.done:
		return ErrClosed
	default:
	}
	if rec.Started.IsZero() {
		rec.Started = r.rec.Started
	}
	r.rec = rec
	err := r.put(ctx, rec, r.lease)
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return nil
	}
	return err
}

// Close stops keeping the record alive and revokes its lease, so the
// record disappears at once. If the revoke fails the record still expires
// with the lease; Close may be called again to retry.
func (r *Registration) Close(ctx context.Context) error {
	r.cancel()
	<-r.done
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.cli.Revoke(ctx, r.lease); err != nil && !errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return fmt.Errorf("revoking the lease of %s: %w", r.key, err)
	}
	return nil
}
