package cli

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tesseradb/tessera/dev"
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// closedAddr returns a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	return addr
}

// TestOpsRefuseBadInput: operation commands check their input before
// they reach for Temporal, and say what is wrong with a SQLSTATE.
func TestOpsRefuseBadInput(t *testing.T) {
	nowhere := "--temporal=" + closedAddr(t)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	cases := []struct {
		args []string
		want string
	}{
		{[]string{"failover", nowhere}, "--shard is required (SQLSTATE 22023)"},
		{[]string{"durability", nowhere, "--shard", "s"}, "--policy is required: async, sync or cross_zone_sync (SQLSTATE 22023)"},
		{[]string{"durability", nowhere, "--shard", "s", "--policy", "quorum"}, `durability "quorum": want async, sync or cross_zone_sync (SQLSTATE 22023)`},
		{[]string{"switchover", nowhere, "--shard", "s", "--at", "tomorrow"}, "want an RFC 3339 time such as 2026-03-05T02:00:00Z (SQLSTATE 22007)"},
		{[]string{"switchover", nowhere, "--shard", "s", "--at", "2001-01-01T00:00:00Z"}, "is not in the future (SQLSTATE 22023)"},
		{[]string{"switchover", nowhere, "--shard", "s", "--at", future, "--cron", "0 2 * * *"}, "none of the others can be"},
	}
	for _, c := range cases {
		_, stderr, code := tessera(t, c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("tessera %s: exit %d, stderr %q; want %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

// knownShard starts an embedded etcd where shard "s" of cluster
// "clitest" has a stored state, and returns the flags that point there.
func knownShard(t *testing.T) (endpoints []string, flags []string) {
	t.Helper()
	endpoints = etcdembed.Start(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := store.Dial(ctx, endpoints, "clitest")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.UpdateShardState(ctx, "s", func(*store.ShardState) error { return nil }); err != nil {
		t.Fatal(err)
	}
	return endpoints, []string{"--etcd", strings.Join(endpoints, ","), "--cluster", "clitest"}
}

// TestOpsRefuseUnknownShard: a mistyped shard is refused before any
// workflow or schedule exists for it, and no state is stored for it.
func TestOpsRefuseUnknownShard(t *testing.T) {
	endpoints, flags := knownShard(t)
	nowhere := "--temporal=" + closedAddr(t)
	future := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	for _, args := range [][]string{
		{"failover", "--shard", "typo"},
		{"switchover", "--shard", "typo"},
		{"switchover", "--shard", "typo", "--cron", "0 2 * * *"},
		{"switchover", "--shard", "typo", "--at", future},
		{"durability", "--shard", "typo", "--policy", "async"},
	} {
		_, stderr, code := tessera(t, append(append(args, nowhere), flags...)...)
		if code != 1 || !strings.Contains(stderr, `shard "typo" does not exist`) || !strings.Contains(stderr, "(SQLSTATE 42704)") {
			t.Errorf("tessera %s: exit %d, stderr %q", strings.Join(args, " "), code, stderr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := store.Dial(ctx, endpoints, "clitest")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if s, err := st.GetShardState(ctx, "typo"); err != nil || s.Revision != 0 {
		t.Errorf("a state was stored for the unknown shard: %+v, %v", s, err)
	}
}

// TestShardCreateRefusesReplicaCount: an out-of-range --replicas is
// refused before any request reaches the dev cluster.
func TestShardCreateRefusesReplicaCount(t *testing.T) {
	endpoints, flags := knownShard(t)
	for _, n := range []string{"-1", "9", "1000000"} {
		_, stderr, code := tessera(t, append([]string{"shard", "create", "s9", "--replicas", n, "--timeout", "1s"}, flags...)...)
		if code != 1 || !strings.Contains(stderr, "--replicas "+n+": want 0 to 8 (SQLSTATE 22023)") {
			t.Errorf("--replicas %s: exit %d, stderr %q", n, code, stderr)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := store.Dial(ctx, endpoints, "clitest")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	resp, err := st.Client().Get(ctx, "/tessera/clitest/dev/", clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil || resp.Count != 0 {
		t.Errorf("%v requests written for the dev cluster (%v)", resp, err)
	}
	if _, err := (&dev.Cluster{}).CreateShard(ctx, "s9", -1); err == nil || pgerr.Code(err) != pgerr.InvalidParameterValue {
		t.Errorf("the dev cluster took a request for -1 replicas: %v", err)
	}
}

// TestOpsWithoutTemporal: with no Temporal to reach, the commands say
// where they looked and how to point them elsewhere.
func TestOpsWithoutTemporal(t *testing.T) {
	_, flags := knownShard(t)
	addr := closedAddr(t)
	for _, args := range [][]string{
		{"failover", "--shard", "s"},
		{"switchover", "--shard", "s"},
		{"switchover", "--shard", "s", "--cron", "0 2 * * *"},
		{"durability", "--shard", "s", "--policy", "async"},
	} {
		start := time.Now()
		_, stderr, code := tessera(t, append(append(args, "--temporal", addr), flags...)...)
		want := "cannot reach Temporal at " + addr
		if code != 1 || !strings.Contains(stderr, want) || !strings.Contains(stderr, "(SQLSTATE 08001)") {
			t.Errorf("tessera %s: exit %d, stderr %q", strings.Join(args, " "), code, stderr)
		}
		if took := time.Since(start); took > 15*time.Second {
			t.Errorf("tessera %s took %s to give up", strings.Join(args, " "), took)
		}
	}
}

// TestTemporalAddressFromDevCluster: without --temporal, the address is
// the dev cluster's, read from DATA/cluster.json.
func TestTemporalAddressFromDevCluster(t *testing.T) {
	endpoints, _ := knownShard(t)
	dir := t.TempDir()
	addr := closedAddr(t)
	doc := `{"temporal": "` + addr + `", "etcd": ["` + endpoints[0] + `"], "cluster": "clitest"}`
	if err := os.WriteFile(filepath.Join(dir, "cluster.json"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := tessera(t, "failover", "--shard", "s", "--data", dir)
	if code != 1 || !strings.Contains(stderr, "cannot reach Temporal at "+addr) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}

}
