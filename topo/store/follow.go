package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
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

// watchList sends the list that build makes of the keys under prefix,
// first as they are now and again after every change, until ctx ends or
// the client is closed; then it closes the channel. A reader that falls
// behind holds the goroutine back but misses nothing. etcd failures are
// retried quietly; meanwhile the last list sent stands. what names the
// keys in the error of the first read.
// decodedList decodes the values under prefix that decode accepts (others
// are skipped: a malformed entry must not hide the rest), sorted by key.
func decodedList[T any](prefix string, kvs []*mvccpb.KeyValue, decode func(string, *mvccpb.KeyValue) (T, bool), key func(T) string) []T {
	out := []T{}
	for _, kv := range kvs {
		if v, ok := decode(prefix, kv); ok {
			out = append(out, v)
		}
	}
	slices.SortFunc(out, func(a, b T) int { return cmp.Compare(key(a), key(b)) })
	return out
}

func watchList[T any](ctx context.Context, cli *clientv3.Client, prefix, what string, build func(prefix string, kvs []*mvccpb.KeyValue) T) (<-chan T, error) {
	opts := []clientv3.OpOption{clientv3.WithPrefix()}
	resp, err := cli.Get(ctx, prefix, opts...)
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", what, err)
	}
	// Keep the raw key-values: the list is rebuilt from them on each change.
	kvs := map[string]*mvccpb.KeyValue{}
	reset := func(resp *clientv3.GetResponse) {
		clear(kvs)
		for _, kv := range resp.Kvs {
			kvs[string(kv.Key)] = kv
		}
	}
	reset(resp)
	out := make(chan T)
	send := func() {
		list := make([]*mvccpb.KeyValue, 0, len(kvs))
		for _, kv := range kvs {
			list = append(list, kv)
		}
		select {
		case out <- build(prefix, list):
		case <-ctx.Done():
		}
	}
	go func() {
		defer close(out)
		send()
		follow(ctx, cli, prefix, opts, resp.Header.Revision+1, follower{
			reset: func(resp *clientv3.GetResponse) { reset(resp); send() },
			apply: func(events []*clientv3.Event) {
				for _, ev := range events {
					if ev.Type == mvccpb.DELETE {
						delete(kvs, string(ev.Kv.Key))
					} else {
						kvs[string(ev.Kv.Key)] = ev.Kv
					}
				}
				send()
			},
			problem: func(error) {},
		})
	}()
	return out, nil
}
