package sidecar_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// isolationFence is the tests' Config.IsolationFence; cutOffWithin is how
// soon after etcd stops a write must be refused.
const (
	isolationFence = 400 * time.Millisecond
	cutOffWithin   = 2 * time.Second
)

// cutOffEtcd is an etcd member of a test's own, which the test stops and
// starts again on the same data and client port: the sidecar's host cut
// off from the topology service, and reaching it again.
type cutOffEtcd struct {
	t    *testing.T
	dir  string
	addr string // the client port the sidecar dials
	srv  *etcdembed.Server
}

func startCutOffEtcd(t *testing.T) *cutOffEtcd {
	t.Helper()
	e := &cutOffEtcd{t: t, dir: t.TempDir(), addr: fmt.Sprintf("127.0.0.1:%d", freePort())}
	e.start(e.addr)
	t.Cleanup(func() {
		if e.srv != nil {
			e.srv.Stop()
		}
	})
	return e
}

// start runs the member on addr, the sidecar's port or another one.
func (e *cutOffEtcd) start(addr string) {
	e.t.Helper()
	srv, err := etcdembed.Run(etcdembed.Options{Dir: e.dir, ClientAddr: addr})
	if err != nil {
		e.t.Fatal(err)
	}
	e.srv = srv
}

// stop stops the member and waits until it has stopped.
func (e *cutOffEtcd) stop() { <-e.stopping() }

// stopping starts stopping the member: it refuses new connections and
// requests at once, but waits up to its request timeout (5 s) for open
// streams before it returns, so tests time the cut from the start.
func (e *cutOffEtcd) stopping() <-chan struct{} {
	srv, done := e.srv, make(chan struct{})
	e.srv = nil
	go func() { defer close(done); srv.Stop() }()
	return done
}

func (e *cutOffEtcd) dial(ctx context.Context, addr string) *store.Store {
	e.t.Helper()
	st, err := store.Dial(ctx, []string{"http://" + addr}, "isolationtest")
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

func setShardPrimary(t *testing.T, ctx context.Context, st *store.Store, shard, id string) {
	t.Helper()
	if _, err := st.UpdateShardState(ctx, shard, func(s *store.ShardState) error {
		s.Primary = id
		s.Term++
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// startIsolatedSidecar runs a sidecar with the isolation fence on, in
// front of inst as instance id of shard.
func startIsolatedSidecar(t *testing.T, ctx context.Context, st *store.Store, inst *pgmanager.Instance, shard, id string) *sidecar.Server {
	t.Helper()
	srv, err := sidecar.New(sidecar.Config{
		ShardUID: shard, InstanceID: id, ListenAddr: "127.0.0.1:0", PostgresAddr: "127.0.0.1:1",
		Secret: secret, Manager: inst, Store: st, Pool: sidecar.DefaultPoolConfig,
		HealthInterval: 200 * time.Millisecond, HeartbeatInterval: time.Second,
		IsolationFence: isolationFence,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(context.Background()) })
	return srv
}

// refusedSoon waits for write to be refused with 57P03 saying the
// instance is cut off, and for health to report it fenced, each within
// cutOffWithin of since.
func refusedSoon(t *testing.T, srv *sidecar.Server, since time.Time, write func() answer) {
	t.Helper()
	for {
		a := write()
		if slices.Equal(a.errors, []string{"57P03"}) {
			if !strings.Contains(a.messages[0], "cut off from the topology service") {
				t.Fatalf("the refusal of a cut-off instance: %q", a.messages[0])
			}
			t.Logf("writes refused %v after etcd stopped", time.Since(since).Round(time.Millisecond))
			break
		}
		if len(a.errors) > 0 {
			t.Fatalf("a write while etcd is stopped: %v", a)
		}
		if time.Since(since) > cutOffWithin {
			t.Fatalf("writes still run %v after etcd stopped (isolation fence %v)", cutOffWithin, isolationFence)
		}
		time.Sleep(20 * time.Millisecond)
	}
	for h := srv.LatestHealth(); !h.Fenced || h.Writable; h = srv.LatestHealth() {
		if time.Since(since) > cutOffWithin {
			t.Fatalf("health %v after etcd stopped: fenced %v, writable %v", cutOffWithin, h.Fenced, h.Writable)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestCutOffPrimaryRefusesBatches: a primary whose sidecar cannot reach
// etcd refuses writes (57P03) within about its isolation fence and
// reports itself fenced, and serves again once etcd is back.
func TestCutOffPrimaryRefusesBatches(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	e := startCutOffEtcd(t)
	st := e.dial(ctx, e.addr)
	defer st.Close()
	setShardPrimary(t, ctx, st, "shard-4", "cutoff-0")
	srv := startIsolatedSidecar(t, ctx, st, shared, "shard-4", "cutoff-0")
	s := open(t, dial(t, srv))
	write := func() answer {
		return query(t, s, pb.Mode_STATEMENT, "INSERT INTO cut_off_writes VALUES (1)")
	}
	if a := query(t, s, pb.Mode_STATEMENT, "CREATE TABLE IF NOT EXISTS cut_off_writes (id int)"); len(a.errors) > 0 {
		t.Fatalf("creating the table: %v", a)
	}
	time.Sleep(2 * isolationFence) // several probes
	if a := write(); len(a.errors) > 0 {
		t.Fatalf("a write with etcd up: %v", a)
	}
	if h := srv.LatestHealth(); h.Fenced || !h.Writable {
		t.Fatalf("health with etcd up: fenced %v, writable %v", h.Fenced, h.Writable)
	}

	stopped := time.Now()
	down := e.stopping()
	refusedSoon(t, srv, stopped, write)
	<-down
	if a := query(t, s, pb.Mode_STATEMENT, "SELECT 1"); !slices.Equal(a.errors, []string{"57P03"}) {
		t.Fatalf("a read while cut off: %v; want 57P03", a)
	}

	restarted := time.Now()
	e.start(e.addr)
	eventually(t, "a write through the sidecar once etcd is back", func() bool {
		a := write()
		if len(a.errors) > 0 && !slices.Equal(a.errors, []string{"57P03"}) {
			t.Fatalf("a write after etcd restarted: %v", a)
		}
		return len(a.errors) == 0
	})
	t.Logf("writes run again %v after etcd restarted", time.Since(restarted).Round(time.Millisecond))
	eventually(t, "health reporting a writable primary", func() bool {
		h := srv.LatestHealth()
		return !h.Fenced && h.Writable
	})
}

// TestPrimaryDeposedWhileCutOffStaysFenced: a primary whose sidecar was
// cut off from etcd while the shard's state came to name another
// instance stays refused once etcd is back: the sidecar applies the state
// it reads before it ends the isolation, and then fences itself as a
// deposed primary. No write runs on it in between.
func TestPrimaryDeposedWhileCutOffStaysFenced(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inst, err := startInstance(ctx, "cutoff-deposed")
	if err != nil {
		t.Fatal(err)
	}
	// Its sidecar fences it: the next run (-count) starts afresh.
	t.Cleanup(func() { os.RemoveAll(filepath.Join(baseDir, "cutoff-deposed")) })
	defer inst.Close(context.Background())
	e := startCutOffEtcd(t)
	st := e.dial(ctx, e.addr)
	defer st.Close()
	setShardPrimary(t, ctx, st, "shard-6", "cutoff-deposed")
	srv := startIsolatedSidecar(t, ctx, st, inst, "shard-6", "cutoff-deposed")
	s := open(t, dial(t, srv))
	write := func() answer {
		return query(t, s, pb.Mode_STATEMENT, "INSERT INTO cut_off_writes VALUES (1)")
	}
	if a := query(t, s, pb.Mode_STATEMENT, "CREATE TABLE cut_off_writes (id int)"); len(a.errors) > 0 {
		t.Fatalf("creating the table: %v", a)
	}
	if a := write(); len(a.errors) > 0 {
		t.Fatalf("a write with etcd up: %v", a)
	}

	stopped := time.Now()
	down := e.stopping()
	refusedSoon(t, srv, stopped, write)
	<-down

	// Meanwhile, on the other side: a failover publishes another primary
	// (etcd on a port the sidecar does not dial).
	other := fmt.Sprintf("127.0.0.1:%d", freePort())
	e.start(other)
	ost := e.dial(ctx, other)
	setShardPrimary(t, ctx, ost, "shard-6", "cutoff-successor")
	ost.Close()
	e.stop()

	// etcd back where the sidecar dials it: no write runs, from before
	// the sidecar reaches it until well after.
	e.start(e.addr)
	var back time.Time
	for back.IsZero() || time.Since(back) < 2*time.Second {
		a := write()
		if !slices.Equal(a.errors, []string{"57P03"}) {
			t.Fatalf("a write on a primary deposed while cut off, after etcd came back: %v", a)
		}
		if back.IsZero() && !srv.CutOff() {
			back = time.Now()
			t.Logf("the sidecar reached etcd again: %q", a.messages[0])
		}
		if !back.IsZero() && time.Since(back) > 200*time.Millisecond && !strings.Contains(a.messages[0], "is fenced") {
			t.Fatalf("refused after etcd came back, but not as fenced: %q", a.messages[0])
		}
		if time.Since(stopped) > time.Minute {
			t.Fatal("the sidecar did not reach etcd again within a minute")
		}
		time.Sleep(5 * time.Millisecond)
	}
	eventually(t, "health reporting a fenced primary", func() bool {
		h := srv.LatestHealth()
		return h.Fenced && !h.Writable
	})
	eventually(t, "Postgres fenced by the deposed primary's sidecar", func() bool {
		ps, err := inst.Status(ctx)
		return err == nil && ps.Fenced
	})
}

// TestIsolationFenceIsValidated: an isolation fence too short to tell a
// cut from etcd's ordinary pauses, or without a topology service to
// probe, is refused when the sidecar is built.
func TestIsolationFenceIsValidated(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Dial(ctx, etcdembed.Start(t), "isolationvalidated")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	for _, c := range []struct {
		fence time.Duration
		store *store.Store
		want  string
	}{
		{100 * time.Millisecond, st, "isolation fence 100ms: want 0 (off) or at least 200ms"},
		{-time.Second, st, "isolation fence -1s"},
		{time.Second, nil, "the isolation fence needs the topology service"},
	} {
		_, err := sidecar.New(sidecar.Config{
			ShardUID: "shard-0", InstanceID: "validated", ListenAddr: "127.0.0.1:0",
			Secret: secret, Manager: shared, Store: c.store, IsolationFence: c.fence,
		})
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("isolation fence %v (store %v): %v; want an error with %q", c.fence, c.store != nil, err, c.want)
		}
	}
}
