package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Pacing of retries after a broken watch, a failed read or a lost lease:
// quick enough that a compaction or a leader change goes unnoticed, slow
// enough that an etcd outage is not made worse.
const (
	minRetryDelay = 100 * time.Millisecond
	maxRetryDelay = 5 * time.Second
)

// follower receives what follow sees. All three run on follow's goroutine.
type follower struct {
	// reset replaces the whole view with a fresh read.
	reset func(*clientv3.GetResponse)
	// apply applies changes, in order, on top of the view.
	apply func([]*clientv3.Event)
	// problem reports a failure that follow is retrying.
	problem func(error)
}

// follow keeps a view of key (a prefix, if opts say so) current, watching
// from etcd revision rev, which the caller's initial read determines. When
// the watch breaks (a compaction it fell behind, a member that lost its
// leader, a closed stream) it pauses, reads the key in full again, and
// watches on from that read, backing off while reads fail. It returns when
// ctx ends or the client is closed.
func follow(ctx context.Context, cli *clientv3.Client, key string, opts []clientv3.OpOption, rev int64, f follower) {
	stopped := func() bool { return ctx.Err() != nil || cli.Ctx().Err() != nil }
	delay := minRetryDelay
	for {
		progressed, err := watchOnce(ctx, cli, key, opts, rev, f.apply)
		if stopped() {
			return
		}
		if progressed {
			delay = minRetryDelay
		}
		// Falling behind a compaction is routine, not a problem.
		if !errors.Is(err, rpctypes.ErrCompacted) {
			f.problem(fmt.Errorf("watching %s: %w; reading it again", key, err))
		}
		for {
			if !sleep(ctx, delay) {
				return
			}
			delay = min(2*delay, maxRetryDelay)
			resp, err := cli.Get(ctx, key, opts...)
			if err == nil {
				f.reset(resp)
				rev = resp.Header.Revision + 1
				break
			}
			if stopped() {
				return
			}
			f.problem(fmt.Errorf("reading %s: %w", key, err))
		}
	}
}

// watchOnce watches key from rev until the watch breaks, and returns why
// and whether any change arrived first.
func watchOnce(ctx context.Context, cli *clientv3.Client, key string, opts []clientv3.OpOption, rev int64, apply func([]*clientv3.Event)) (progressed bool, err error) {
	// Requiring a leader makes a member cut off from its cluster break the
	// watch, rather than leave it silently delivering nothing.
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for wr := range cli.Watch(wctx, key, append(slices.Clip(opts), clientv3.WithRev(rev))...) {
		if err := wr.Err(); err != nil {
			return progressed, err
		}
		if len(wr.Events) > 0 {
			apply(wr.Events)
			progressed = true
		}
	}
	return progressed, errors.New("watch closed")
}

// sleep waits for d and reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
