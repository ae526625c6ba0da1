package admin

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// TestLeadership: of two admins exactly one leads; when it stops, the
// other takes over at once (the leader resigns: well within the session
// TTL), and the two never lead at the same time.
func TestLeadership(t *testing.T) {
	endpoints := etcdembed.Start(t)
	cfg := func(id string) Config {
		return Config{Store: dialStore(t, endpoints), Secret: secret, Starter: newRecorder(), ID: id, SessionTTL: 3 * time.Second}
	}
	a, stopA := runAdmin(t, cfg("a"))
	b, stopB := runAdmin(t, cfg("b"))

	// Sample leadership all along: two leaders at once is the failure.
	var both atomic.Bool
	sampling, stopSampling := context.WithCancel(context.Background())
	sampled := make(chan struct{})
	go func() {
		defer close(sampled)
		for sampling.Err() == nil {
			if a.Leader() && b.Leader() {
				both.Store(true)
			}
			time.Sleep(time.Millisecond)
		}
	}()

	waitFor(t, 5*time.Second, "a leader", func() bool { return a.Leader() != b.Leader() })
	first, second, stopFirst := a, b, stopA
	if b.Leader() {
		first, second, stopFirst = b, a, stopB
	}
	// Both campaign; the oldest election key names the leader.
	var resp *clientv3.GetResponse
	waitFor(t, 5*time.Second, "both campaigning", func() bool {
		var err error
		resp, err = first.cfg.Store.Client().Get(context.Background(), LeaderKey("test"), clientv3.WithPrefix(),
			clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
		return err == nil && len(resp.Kvs) == 2
	})
	if string(resp.Kvs[0].Value) != first.cfg.ID {
		t.Fatalf("the election's leader is %q, but %s leads", resp.Kvs[0].Value, first.cfg.ID)
	}
	time.Sleep(300 * time.Millisecond)
	if got := leaders(a, b); got != first.cfg.ID {
		t.Fatalf("leaders after settling: %q", got)
	}

	started := time.Now()
	stopFirst()
	waitFor(t, time.Second, "takeover after the leader stopped", second.Leader)
	t.Logf("takeover took %s", time.Since(started))
	stopSampling()
	<-sampled
	if both.Load() {
		t.Error("both admins led at the same time")
	}
}

// revokeLeader revokes the lease of the current election leader, as
// etcd does when a leader is cut off for longer than its session TTL.
func revokeLeader(t *testing.T, a *Admin) {
	t.Helper()
	cli := a.cfg.Store.Client()
	resp, err := cli.Get(context.Background(), LeaderKey("test"), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByCreateRevision, clientv3.SortAscend))
	if err != nil || len(resp.Kvs) == 0 {
		t.Fatalf("election keys: %v %v", resp, err)
	}
	if _, err := cli.Revoke(context.Background(), clientv3.LeaseID(resp.Kvs[0].Lease)); err != nil {
		t.Fatal(err)
	}
}

// TestLeadershipLostSession: a leader whose session is lost steps down,
// the other admin takes over, and the first campaigns again behind it.
func TestLeadershipLostSession(t *testing.T) {
	endpoints := etcdembed.Start(t)
	cfg := func(id string) Config {
		return Config{Store: dialStore(t, endpoints), Secret: secret, Starter: newRecorder(), ID: id, SessionTTL: time.Second}
	}
	a, _ := runAdmin(t, cfg("a"))
	b, _ := runAdmin(t, cfg("b"))
	waitFor(t, 5*time.Second, "a leader", func() bool { return a.Leader() != b.Leader() })
	first, second := a, b
	if b.Leader() {
		first, second = b, a
	}
	revokeLeader(t, first)
	waitFor(t, 3*time.Second, "the other admin takes over", second.Leader)
	waitFor(t, 3*time.Second, "the revoked leader steps down", func() bool { return !first.Leader() })
	// The first is back in the race, behind the second.
	waitFor(t, 3*time.Second, "the first campaigns again", func() bool {
		resp, err := first.cfg.Store.Client().Get(context.Background(), LeaderKey("test"), clientv3.WithPrefix())
		return err == nil && len(resp.Kvs) == 2
	})
	time.Sleep(200 * time.Millisecond)
	if got := leaders(a, b); got != second.cfg.ID {
		t.Fatalf("leaders: %q, want %s", got, second.cfg.ID)
	}
}
