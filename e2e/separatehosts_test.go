package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"

	"github.com/tesseradb/tessera/cli"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// The cluster of separate hosts: every process on a host of its own,
// reaching the others only over the network, as in production.
//
//	etcd-a etcd-b etcd-c       a 3-member etcd, one per zone
//	s0-a s0-b s0-c             shard-0's instances, zones a, b, c
//	s1-a s1-b s1-c             shard-1's instances
//	r1 r2                      two routers
//	ctl                        Temporal and the worker with its admin
var separateHosts = []string{"etcd-a", "etcd-b", "etcd-c", "s0-a", "s0-b", "s0-c", "s1-a", "s1-b", "s1-c", "r1", "r2", "ctl"}

const (
	labCluster  = "netlab"
	labSecret   = "netlab-cluster-secret-0123456789"
	labPassword = "netlab-postgres-password"
)

// labTopology shards table writes by id over the two shards; shard-0
// also holds the authoritative group.
const labTopology = `{
  "authoritative_shard_group": "main",
  "default_shard_group": "main",
  "shard_indexes": {"id_xxhash": {"type": "xxhash", "columns": ["id"]}},
  "shard_groups": [
    {"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]},
    {"uid": "kv", "default_shard_index": "id_xxhash",
     "key_ranges": [{"shard_uid": "shard-0", "end": "80"}, {"shard_uid": "shard-1", "start": "80"}]}
  ],
  "databases": {"postgres": {"schemas": {"public": {"tables": {"writes": {"shard_group": "kv"}}}}}}
}`

// TestClusterOfSeparateHosts builds the cluster above from network
// namespaces, writes through both routers, then kills the host of
// shard-0's primary (every process on it) and cuts the host of shard-1's
// primary off the network. Each shard fails over; the cut-off primary,
// which no longer reaches etcd, refuses a write sent straight to its
// sidecar from its own host (no two primaries take writes); every
// acknowledged write is there afterwards; and both hosts rejoin as
// replicas, the cut one when the cut ends, the killed one when it is
// started again. It prints each failover's time and the writers'
// longest gaps between acknowledged writes.
func TestClusterOfSeparateHosts(t *testing.T) {
	requireNetLab(t)
	lab := newNetLab(t, separateHosts...)
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()

	secrets := filepath.Join(lab.base, "secrets")
	os.Mkdir(secrets, 0o700)
	secretFile, passwordFile := filepath.Join(secrets, "cluster"), filepath.Join(secrets, "postgres")
	os.WriteFile(secretFile, []byte(labSecret), 0o600)
	os.WriteFile(passwordFile, []byte(labPassword), 0o600)

	// etcd: three members, one per zone.
	var initial, endpoints []string
	for _, h := range []string{"etcd-a", "etcd-b", "etcd-c"} {
		initial = append(initial, h+"=http://"+lab.addr(h, 2380))
		endpoints = append(endpoints, "http://"+lab.addr(h, 2379))
	}
	for _, h := range []string{"etcd-a", "etcd-b", "etcd-c"} {
		spec, _ := json.Marshal(etcdembed.Options{Dir: filepath.Join(lab.base, h), Name: h,
			ClientAddr: lab.addr(h, 2379), PeerAddr: lab.addr(h, 2380), InitialCluster: strings.Join(initial, ",")})
		lab.start(h, "etcd", hostEtcdEnv+"="+string(spec))
	}
	etcdList := strings.Join(endpoints, ",")
	temporalProc := lab.start("ctl", "temporal", hostTemporalEnv+"="+lab.hosts["ctl"].ip)

	var st *store.Store
	eventually(t, time.Minute, "the 3-member etcd serves", func() error {
		dctx, dcancel := context.WithTimeout(ctx, 5*time.Second)
		defer dcancel()
		s, err := store.Dial(dctx, endpoints, labCluster)
		if err != nil {
			return err
		}
		if _, err := s.GetShardState(dctx, "shard-0"); err != nil {
			s.Close()
			return err
		}
		st = s
		return nil
	})
	defer st.Close()
	topoFile := filepath.Join(lab.base, "topology.json")
	os.WriteFile(topoFile, []byte(labTopology), 0o644)
	var topoOut strings.Builder
	if code := cli.RunContext(ctx, []string{"topo", "apply", "--etcd", etcdList, "--cluster", labCluster, topoFile}, &topoOut, &topoOut, cli.Options{}); code != 0 {
		t.Fatalf("topo apply: %s", topoOut.String())
	}

	// Instances: the first of each shard creates it; the others then
	// base-backup from it.
	instanceArgs := func(host string) []string {
		shard, zone := "shard-"+host[1:2], "zone-"+host[3:]
		return []string{"instance", "--etcd", etcdList, "--cluster", labCluster, "--shard", shard, "--id", host, "--zone", zone,
			"--dir", filepath.Join(lab.base, host, "instance"),
			"--postgres-listen", lab.addr(host, 5432), "--sidecar-listen", lab.addr(host, 6500), "--session-listen", lab.addr(host, 6501),
			"--allowed-networks", lab.subnet + ".0/24", "--secret-file", secretFile, "--postgres-password-file", passwordFile}
	}
	instances := map[string]*labProc{}
	startInstance := func(host string) {
		os.MkdirAll(filepath.Join(lab.base, host), 0o755)
		instances[host] = lab.startTessera(host, "instance", instanceArgs(host)...)
	}
	startInstance("s0-a")
	startInstance("s1-a")
	waitRole(t, lab, st, instances, "s0-a", store.RolePrimary)
	waitRole(t, lab, st, instances, "s1-a", store.RolePrimary)
	for _, h := range []string{"s0-b", "s0-c", "s1-b", "s1-c"} {
		startInstance(h)
	}
	for _, h := range []string{"s0-b", "s0-c", "s1-b", "s1-c"} {
		waitRole(t, lab, st, instances, h, store.RoleReplica)
	}
	eventually(t, 2*time.Minute, "Temporal serves on its host", func() error {
		if temporalProc.exited() {
			t.Fatalf("Temporal exited:\n%s", lab.output(temporalProc))
		}
		c, err := client.Dial(client.Options{HostPort: lab.addr("ctl", 7233), Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
		if err != nil {
			return err
		}
		c.Close()
		return nil
	})
	worker := lab.startTessera("ctl", "worker", "worker", "--temporal", lab.addr("ctl", 7233), "--etcd", etcdList,
		"--cluster", labCluster, "--secret-file", secretFile, "--id", "worker-1")
	routers := []string{"r1", "r2"}
	for _, r := range routers {
		lab.startTessera(r, "router", "router", "--listen", lab.addr(r, 6432), "--etcd", etcdList, "--cluster", labCluster,
			"--secret-file", secretFile)
	}

	// The admin stores each shard's state and sets synchronous
	// replication (durability sync, the default): wait until each
	// primary has both replicas streaming and one synchronous.
	for _, shard := range []string{"shard-0", "shard-1"} {
		eventually(t, 2*time.Minute, shard+" has a primary with synchronous replicas", func() error {
			if worker.exited() {
				t.Fatalf("the worker exited:\n%s", lab.output(worker))
			}
			s, err := st.GetShardState(ctx, shard)
			if err != nil || s.Primary == "" {
				return fmt.Errorf("state %+v: %v", s, err)
			}
			return synchronousReplicas(ctx, lab.addr(s.Primary, 5432), 2)
		})
	}
	r1 := labConnect(t, ctx, lab.addr("r1", 6432))
	if _, err := r1.Exec(ctx, "CREATE TABLE writes (id bigint PRIMARY KEY, writer int NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	r1.Close(ctx)

	// Two writers on each router, each inserting rows one at a time.
	var writers []*labWriter
	stopWriters := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 4 {
		w := &labWriter{id: i, router: routers[i%2], addr: lab.addr(routers[i%2], 6432)}
		writers = append(writers, w)
		wg.Add(1)
		go func() { defer wg.Done(); w.run(ctx, stopWriters) }()
	}
	waitAcks := func(what string) {
		t.Helper()
		marks := make([]int, len(writers))
		for i, w := range writers {
			marks[i] = w.acked()
		}
		eventually(t, time.Minute, "every writer acknowledged writes "+what, func() error {
			for i, w := range writers {
				if w.acked() < marks[i]+20 {
					return fmt.Errorf("writer %d (router %s): %d acknowledged since; last error: %v", w.id, w.router, w.acked()-marks[i], w.lastError())
				}
			}
			return nil
		})
	}
	waitAcks("before any fault")

	// Kill the host of shard-0's primary.
	before0, _ := st.GetShardState(ctx, "shard-0")
	killed := before0.Primary
	killedAt := time.Now()
	lab.kill(killed)
	failover0 := waitNewPrimary(t, ctx, st, "shard-0", killed)
	t.Logf("shard-0: host %s killed; %s primary after %v", killed, failover0.Primary, time.Since(killedAt).Round(time.Millisecond))
	killFailover := time.Since(killedAt)
	waitAcks("after the kill")

	// Cut the host of shard-1's primary off the network. A write sent
	// to its sidecar from its own host completes before the cut (the
	// probe can tell) and is refused once the host has lost etcd.
	before1, _ := st.GetShardState(ctx, "shard-1")
	cutHost := before1.Primary
	probeEnv := func(id int) string {
		spec, _ := json.Marshal(sidecarProbe{SessionAddr: lab.addr(cutHost, 6501), Secret: labSecret,
			SQL: fmt.Sprintf("INSERT INTO writes VALUES (%d, -1)", id)})
		return hostProbeEnv + "=" + string(spec)
	}
	if ans := runProbe(t, lab, cutHost, probeEnv(-1)); !ans.Completed {
		t.Fatalf("a write straight to %s's sidecar before the cut: %+v", cutHost, ans)
	}
	cutAt := time.Now()
	lab.cut(cutHost)
	var refused probeAnswer
	var refusedAfter time.Duration
	eventually(t, 30*time.Second, "the cut-off primary refuses writes", func() error {
		refused = runProbe(t, lab, cutHost, probeEnv(-2))
		if refused.Completed {
			t.Fatalf("the cut-off primary %s took a write %v after the cut: %+v", cutHost, time.Since(cutAt), refused)
		}
		if refused.Code == "" {
			return fmt.Errorf("no refusal yet: %+v", refused)
		}
		refusedAfter = time.Since(cutAt)
		return nil
	})
	failover1 := waitNewPrimary(t, ctx, st, "shard-1", cutHost)
	cutFailover := time.Since(cutAt)
	t.Logf("shard-1: host %s cut off; it refused writes (%s %q) %v after the cut; %s primary after %v",
		cutHost, refused.Code, refused.Error, refusedAfter.Round(time.Millisecond), failover1.Primary, cutFailover.Round(time.Millisecond))
	waitAcks("after the cut")

	// The cut ends and the killed host starts again: both rejoin their
	// shards as replicas of the new primaries.
	lab.heal(cutHost)
	startInstance(killed)
	for host, primary := range map[string]string{cutHost: failover1.Primary, killed: failover0.Primary} {
		eventually(t, 3*time.Minute, host+" rejoins as a replica", func() error {
			if p := instances[host]; p.exited() {
				t.Fatalf("instance %s exited:\n%s", host, lab.output(p))
			}
			recs, err := st.ListRecords(ctx, store.KindSidecar)
			if err != nil {
				return err
			}
			for _, rec := range recs {
				if rec.ID == host && rec.Role != store.RoleReplica {
					return fmt.Errorf("%s registered as %q", host, rec.Role)
				}
			}
			return streamingFrom(ctx, lab.addr(primary, 5432), host)
		})
	}
	waitAcks("after the rejoins")
	close(stopWriters)
	wg.Wait()

	// Every acknowledged write is there, read through either router.
	total := 0
	present := map[int64]bool{}
	conn := labConnect(t, ctx, lab.addr("r2", 6432))
	rows, err := conn.Query(ctx, "SELECT id FROM writes WHERE writer >= 0")
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var id int64
		rows.Scan(&id)
		present[id] = true
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)
	for _, w := range writers {
		for _, id := range w.ids {
			total++
			if !present[id] {
				t.Errorf("writer %d: acknowledged id %d is missing", w.id, id)
			}
		}
	}
	var gaps []string
	for _, w := range writers {
		if w.timedOut > 0 {
			t.Errorf("writer %d via %s: %d statements had no answer within %v (a session left waiting on the cut-off primary)", w.id, w.router, w.timedOut, writeTimeout)
		}
		gaps = append(gaps, fmt.Sprintf("writer %d via %s: %d acknowledged, %d failed, longest gap %v", w.id, w.router, len(w.ids), w.failed, w.maxGap.Round(time.Millisecond)))
	}
	t.Logf("%d hosts; failover after killing %s's host: %v; after cutting %s's host: %v (its writes refused after %v); %d acknowledged writes checked, %d rows present; %s",
		len(separateHosts), killed, killFailover.Round(time.Millisecond), cutHost, cutFailover.Round(time.Millisecond), refusedAfter.Round(time.Millisecond),
		total, len(present), strings.Join(gaps, "; "))
}

// waitRole waits until host's sidecar is registered in role.
func waitRole(t *testing.T, lab *netLab, st *store.Store, procs map[string]*labProc, host, role string) {
	t.Helper()
	eventually(t, 3*time.Minute, host+" registers as "+role, func() error {
		if p := procs[host]; p.exited() {
			t.Fatalf("instance %s exited:\n%s", host, lab.output(p))
		}
		recs, err := st.ListRecords(context.Background(), store.KindSidecar)
		if err != nil {
			return err
		}
		for _, rec := range recs {
			if rec.ID == host {
				if rec.Role != role {
					return fmt.Errorf("registered as %q", rec.Role)
				}
				return nil
			}
		}
		return fmt.Errorf("not registered")
	})
}

// waitNewPrimary waits until shard's state names a primary other than
// old, and returns that state.
func waitNewPrimary(t *testing.T, ctx context.Context, st *store.Store, shard, old string) store.ShardState {
	t.Helper()
	var s store.ShardState
	eventually(t, 2*time.Minute, shard+" fails over", func() error {
		var err error
		s, err = st.GetShardState(ctx, shard)
		if err != nil {
			return err
		}
		if s.Primary == "" || s.Primary == old {
			return fmt.Errorf("primary still %q", s.Primary)
		}
		return nil
	})
	return s
}

func runProbe(t *testing.T, lab *netLab, host, env string) probeAnswer {
	t.Helper()
	out, err := lab.run(host, 10*time.Second, env)
	var ans probeAnswer
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "{") && json.Unmarshal([]byte(line), &ans) == nil {
			return ans
		}
	}
	return probeAnswer{Error: fmt.Sprintf("probe: %v: %s", err, out)}
}

func labDSN(addr string) string {
	return fmt.Sprintf("postgres://postgres:%s@%s/postgres?sslmode=disable&connect_timeout=5", labPassword, addr)
}

func labConnect(t *testing.T, ctx context.Context, addr string) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(ctx, labDSN(addr))
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// synchronousReplicas checks that the Postgres at addr streams to want
// replicas and waits for at least one of them at commit.
func synchronousReplicas(ctx context.Context, addr string, want int) error {
	c, err := pgx.Connect(ctx, labDSN(addr))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var streaming, sync int
	err = c.QueryRow(ctx, `SELECT count(*) FILTER (WHERE state = 'streaming'), count(*) FILTER (WHERE sync_state IN ('sync', 'quorum'))
		FROM pg_stat_replication`).Scan(&streaming, &sync)
	if err != nil {
		return err
	}
	if streaming < want || sync == 0 {
		return fmt.Errorf("%d replicas streaming, %d synchronous", streaming, sync)
	}
	return nil
}

// streamingFrom checks that replica streams from the Postgres at addr.
func streamingFrom(ctx context.Context, addr, replica string) error {
	c, err := pgx.Connect(ctx, labDSN(addr))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_replication WHERE application_name = $1 AND state = 'streaming'", replica).Scan(&n); err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%s does not stream from %s", replica, addr)
	}
	return nil
}
