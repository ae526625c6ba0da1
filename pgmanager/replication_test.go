package pgmanager

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"
)

// One cluster through its whole life: a primary and two replicas, streaming
// and synchronous replication, then the primary crashes after a write its
// replicas never saw; one replica is promoted, the other follows it, and
// the old primary is rewound to rejoin as a replica without its divergent
// write.
func TestReplicationFailover(t *testing.T) {
	t.Parallel()
	base := baseDir(t)
	// A password with every character pgpass and conninfo treat specially.
	const password = `pa:ss\w'rd x`
	mk := func(id string) *Instance {
		return newInstance(t, base, id, func(c *Config) { c.SuperuserPassword = password })
	}
	a, b, c := mk("node-a"), mk("node-b"), mk("node-c")
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	status := func(inst *Instance) Status {
		t.Helper()
		st, err := inst.Status(ctx)
		must(err)
		return st
	}
	replicaNames := func(st Status, state string) []string {
		var names []string
		for _, r := range st.Replicas {
			if state == "" || r.State == state {
				names = append(names, r.ApplicationName)
			}
		}
		return names
	}

	must(a.InitPrimary(ctx))
	must(a.Start(ctx))
	execSQL(t, a, "CREATE TABLE t (id int PRIMARY KEY, v text); INSERT INTO t VALUES (1, 'before')")
	for _, r := range []*Instance{b, c} {
		must(r.InitReplica(ctx, a.Endpoint()))
		must(r.InitReplica(ctx, a.Endpoint())) // a no-op the second time
		must(r.Start(ctx))
	}

	t.Run("streaming", func(t *testing.T) {
		wantQuery(t, a, 10*time.Second,
			"SELECT string_agg(slot_name || ':' || active, ',' ORDER BY slot_name) FROM pg_replication_slots",
			"node_b:true,node_c:true")
		execSQL(t, a, "INSERT INTO t VALUES (2, 'streamed')")
		for _, r := range []*Instance{b, c} {
			wantQuery(t, r, 5*time.Second, "SELECT v FROM t WHERE id = 2", "streamed")
			if got := mustQuery(t, r, "SELECT v FROM t WHERE id = 1"); got != "before" {
				t.Errorf("base backup row: %q", got)
			}
		}
		wantSQLState(t, tryExec(b, "INSERT INTO t VALUES (99, 'x')"), "25006")
		if !b.isStandby() || !strings.Contains(readFile(t, filepath.Join(b.DataDir(), standbyConfFile)), "primary_slot_name = 'node_b'") {
			t.Error("replica has no standby configuration")
		}
	})

	t.Run("status", func(t *testing.T) {
		var stA Status
		eventually(t, 10*time.Second, "both replicas streaming", func() error {
			stA = status(a)
			if got := replicaNames(stA, "streaming"); !slices.Equal(got, []string{"node-b", "node-c"}) {
				return fmt.Errorf("streaming replicas %v", got)
			}
			return nil
		})
		if stA.Role != RolePrimary || stA.Timeline != 1 || stA.CurrentLSN == 0 || stA.ReceiveLSN != 0 {
			t.Errorf("primary status %+v", stA)
		}
		execSQL(t, a, "INSERT INTO t SELECT g, 'bulk' FROM generate_series(100, 1100) g")
		stA2 := status(a)
		if stA2.CurrentLSN <= stA.CurrentLSN {
			t.Errorf("primary LSN did not move: %v then %v", stA.CurrentLSN, stA2.CurrentLSN)
		}
		eventually(t, 10*time.Second, "replica replays the insert", func() error {
			stB := status(b)
			if stB.Role != RoleReplica || stB.Timeline != 1 || stB.ReceiverStatus != "streaming" ||
				stB.Upstream != a.Endpoint() || stB.CurrentLSN != 0 {
				return fmt.Errorf("replica status %+v", stB)
			}
			if stB.ReplayLSN < stA2.CurrentLSN || stB.ReceiveLSN < stB.ReplayLSN {
				return fmt.Errorf("replica at receive %v replay %v, primary at %v", stB.ReceiveLSN, stB.ReplayLSN, stA2.CurrentLSN)
			}
			if stB.ReplayLag != 0 {
				return fmt.Errorf("caught-up replica reports lag %v", stB.ReplayLag)
			}
			return nil
		})
	})

	t.Run("synchronous", func(t *testing.T) {
		const names = `FIRST 1 ("node-b")`
		must(a.SetSynchronousStandbys(ctx, names))
		if got := mustQuery(t, a, "SHOW synchronous_standby_names"); got != names {
			t.Fatalf("synchronous_standby_names = %q", got)
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
		conn := dial(t, a)
		if _, err := conn.Exec(cctx, "INSERT INTO t VALUES (3, 'sync')"); err != nil {
			t.Fatalf("synchronous commit with the standby up: %v", err)
		}
		eventually(t, 10*time.Second, "node-b is the sync standby", func() error {
			for _, r := range status(a).Replicas {
				if r.ApplicationName == "node-b" && r.SyncState == "sync" {
					return nil
				}
			}
			return fmt.Errorf("replicas %+v", status(a).Replicas)
		})
		if st := status(a); st.SynchronousStandbyNames != names {
			t.Errorf("Status.SynchronousStandbyNames = %q", st.SynchronousStandbyNames)
		}
		must(a.SetSynchronousStandbys(ctx, ""))
		if got := mustQuery(t, a, "SHOW synchronous_standby_names"); got != "" {
			t.Fatalf("synchronous_standby_names after clearing = %q", got)
		}
	})

	t.Run("failover", func(t *testing.T) {
		// Both replicas have everything; stop c, then b, so that c is never
		// ahead of b and can follow it after b's promotion.
		target := status(a).CurrentLSN
		for _, r := range []*Instance{b, c} {
			eventually(t, 10*time.Second, "replica caught up", func() error {
				if st := status(r); st.ReplayLSN < target {
					return fmt.Errorf("%v < %v", st.ReplayLSN, target)
				}
				return nil
			})
		}
		must(c.Stop(ctx))
		must(b.Stop(ctx))

		// a takes a write nobody else sees, then crashes.
		execSQL(t, a, "INSERT INTO t VALUES (10, 'divergent')")
		exited := a.Exited()
		must(syscall.Kill(a.PID(), syscall.SIGKILL))
		<-exited
		if a.Running() {
			t.Fatal("a still Running after kill -9")
		}

		// b becomes the primary and takes writes on timeline 2.
		must(b.Start(ctx))
		must(b.Promote(ctx))
		must(b.Promote(ctx)) // idempotent on a primary
		stB := status(b)
		if stB.Role != RolePrimary || stB.Timeline != 2 {
			t.Fatalf("promoted status %+v", stB)
		}
		if b.isStandby() || strings.Contains(readFile(t, filepath.Join(b.DataDir(), standbyConfFile)), "primary_conninfo") {
			t.Error("standby configuration left after promotion")
		}
		if got := mustQuery(t, b, "SHOW primary_conninfo"); got != "" {
			t.Errorf("primary_conninfo after promotion = %q", got)
		}
		execSQL(t, b, "INSERT INTO t VALUES (20, 'new primary')")
		if err := b.FollowPrimary(ctx, c.Endpoint()); err == nil || !strings.Contains(err.Error(), "is a primary") {
			t.Errorf("FollowPrimary on a primary: %v", err)
		}

		// c, still pointing at the dead a, is repointed while running.
		must(c.Start(ctx))
		must(c.FollowPrimary(ctx, b.Endpoint()))
		wantQuery(t, c, 15*time.Second, "SELECT v FROM t WHERE id = 20", "new primary")

		// a is rewound: it loses its divergent row and follows b.
		must(a.Rewind(ctx, b.Endpoint()))
		if st := status(a); st.Role != RoleReplica {
			t.Fatalf("rewound status %+v", st)
		}
		wantQuery(t, a, 15*time.Second, "SELECT v FROM t WHERE id = 20", "new primary")
		if got := mustQuery(t, a, "SELECT count(*)::text FROM t WHERE id = 10"); got != "0" {
			t.Error("the divergent row survived the rewind")
		}
		if got := mustQuery(t, a, "SELECT count(*)::text FROM pg_replication_slots"); got != "0" {
			t.Errorf("rewound instance keeps %s slots from its primary days", got)
		}

		execSQL(t, b, "INSERT INTO t VALUES (30, 'after failover')")
		for _, r := range []*Instance{a, c} {
			wantQuery(t, r, 10*time.Second, "SELECT v FROM t WHERE id = 30", "after failover")
			eventually(t, 10*time.Second, "replica streams from b on timeline 2", func() error {
				st := status(r)
				if st.Upstream != b.Endpoint() || st.ReceiverStatus != "streaming" || st.Timeline != 2 {
					return fmt.Errorf("status %+v", st)
				}
				return nil
			})
		}
		eventually(t, 10*time.Second, "b serves both replicas", func() error {
			if got := replicaNames(status(b), "streaming"); !slices.Equal(got, []string{"node-a", "node-c"}) {
				return fmt.Errorf("streaming replicas %v", got)
			}
			return nil
		})
		wantQuery(t, b, 5*time.Second,
			"SELECT string_agg(slot_name || ':' || active, ',' ORDER BY slot_name) FROM pg_replication_slots",
			"node_a:true,node_c:true")
	})
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
