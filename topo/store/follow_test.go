package store

import (
	"context"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

func newTestClient(t *testing.T) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(testClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}

// recorder is a follower that hands what it sees to the test.
type recorder struct {
	resets, applied chan string
	problems        chan error
}

func newRecorder() *recorder {
	return &recorder{resets: make(chan string, 10), applied: make(chan string, 10), problems: make(chan error, 10)}
}

func (r *recorder) follower() follower {
	return follower{
		reset: func(resp *clientv3.GetResponse) {
			for _, kv := range resp.Kvs {
				r.resets <- string(kv.Value)
			}
		},
		apply: func(events []*clientv3.Event) {
			for _, ev := range events {
				r.applied <- string(ev.Kv.Value)
			}
		},
		problem: func(err error) { r.problems <- err },
	}
}

func receive[T any](t *testing.T, c <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-c:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s", what)
		panic("unreachable")
	}
}

// TestFollowResyncsAfterCompaction starts a watch behind a compaction, as
// a watcher that fell behind would be, which etcd refuses: follow must read
// the key again and watch on from there, without calling it a problem.
func TestFollowResyncsAfterCompaction(t *testing.T) {
	ctx := t.Context()
	cli := newTestClient(t)
	key := "/tessera-test/" + t.Name()
	var revs []int64
	for _, v := range []string{"v1", "v2", "v3"} {
		resp, err := cli.Put(ctx, key, v)
		if err != nil {
			t.Fatal(err)
		}
		revs = append(revs, resp.Header.Revision)
	}
	if _, err := cli.Compact(ctx, revs[2]); err != nil {
		t.Fatal(err)
	}

	r := newRecorder()
	fctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		follow(fctx, cli, key, nil, revs[0]+1, r.follower())
	}()
	if v := receive(t, r.resets, "read after the compaction"); v != "v3" {
		t.Errorf("read after the compaction = %q, want v3", v)
	}
	if _, err := cli.Put(ctx, key, "v4"); err != nil {
		t.Fatal(err)
	}
	if v := receive(t, r.applied, "change after the read"); v != "v4" {
		t.Errorf("change after the read = %q, want v4", v)
	}
	cancel()
	receive(t, done, "end of follow when its context ended")
	select {
	case err := <-r.problems:
		t.Errorf("compaction reported as a problem: %v", err)
	default:
	}
}

// TestFollowStopsWithClient checks that follow does not retry forever on a
// closed client.
func TestFollowStopsWithClient(t *testing.T) {
	cli, err := clientv3.New(testClientConfig())
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		follow(t.Context(), cli, "/tessera-test/"+t.Name(), nil, 1, newRecorder().follower())
	}()
	cli.Close()
	receive(t, done, "end of follow when its client closed")
}
