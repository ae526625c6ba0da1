package admin

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/sidecar"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// startPrimary runs a real Postgres primary under pgmanager with a
// sidecar registered in s, as `tessera dev` does, until the test ends.
func startPrimary(t *testing.T, s *store.Store, shard, id string) (*pgmanager.Instance, *sidecar.Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	dir, err := os.MkdirTemp("", "admin-test-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755) // Postgres runs as an unprivileged user when we are root
	pg, err := pgmanager.New(pgmanager.Config{InstanceID: id, Dir: filepath.Join(dir, id), Port: freePort(t)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Close(context.Background()) })
	if err := pg.InitPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	sc, err := sidecar.New(sidecar.Config{
		ShardUID: shard, InstanceID: id, Zone: "zone-a",
		ListenAddr:     "127.0.0.1:0",
		PostgresAddr:   net.JoinHostPort("127.0.0.1", "0"),
		Secret:         secret,
		Manager:        pg,
		Store:          s,
		HealthInterval: 100 * time.Millisecond, HeartbeatInterval: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := sc.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sc.Stop(context.Background()) })
	return pg, sc
}

// TestMonitorRealPrimary runs an admin against a real sidecar and
// Postgres: it repairs a shard with no stored state, keeps a primary that
// comes back within the detection window, and fails over one that does
// not, no sooner than the window.
func TestMonitorRealPrimary(t *testing.T) {
	ctx := context.Background()
	s := dialStore(t, etcdembed.Start(t))
	pg, _ := startPrimary(t, s, "m-shard", "m-0")
	rec := newRecorder()
	const window = 2 * time.Second
	a, _ := runAdmin(t, Config{Store: s, Secret: secret, Starter: rec, ID: "solo",
		DetectWindow: window, Grace: 300 * time.Millisecond, StatusInterval: 100 * time.Millisecond,
		RetryInterval: time.Second, RepairInterval: time.Hour})
	waitFor(t, 5*time.Second, "leadership", a.Leader)

	// No ShardState yet: the one primary is up, so the shard is repaired.
	rec.await(t, 5*time.Second, "repair of a shard with no state", func(x Action) bool {
		return x.Kind == ActRepair && x.Shard == "m-shard"
	})
	if _, err := s.UpdateShardState(ctx, "m-shard", func(st *store.ShardState) error {
		st.Primary, st.Term, st.Durability = "m-0", 1, store.DurabilityAsync
		return nil
	}); err != nil {
		t.Fatal(err)
	}

	// Down for less than the window: kept.
	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "the admin sees the primary down", func() bool { return !observed(a, "m-shard", "m-0").Up() })
	time.Sleep(window / 4)
	if err := pg.Start(ctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 3*time.Second, "the admin sees the primary up", func() bool { return observed(a, "m-shard", "m-0").Up() })
	time.Sleep(window)
	for _, x := range rec.actions() {
		if x.Kind == ActFailover {
			t.Fatalf("failed over a primary that came back within the window: %+v", x)
		}
	}

	// Down for good: failed over, no sooner than the window.
	stopped := time.Now()
	if err := pg.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	f := rec.await(t, window+3*time.Second, "failover", func(x Action) bool { return x.Kind == ActFailover })
	took := time.Since(stopped)
	t.Logf("failover started %s after the primary stopped: %s", took, f.Reason)
	if f.Shard != "m-shard" || !strings.Contains(f.Reason, "primary m-0 is not serving") {
		t.Errorf("failover %+v", f)
	}
	if took < window {
		t.Errorf("failover after %s, before the %s window", took, window)
	}
	if n := len(rec.actions()); n > 2 {
		t.Errorf("repeated starts: %+v", rec.actions())
	}
}

// observed returns what the admin's monitor last saw of an instance.
func observed(a *Admin, shard, id string) Instance {
	shards, _ := a.mon.snapshot(time.Now())
	for _, sh := range shards {
		if sh.UID == shard {
			if in := find(sh.Instances, id); in != nil {
				return *in
			}
		}
	}
	return Instance{}
}
