package cli

import (
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
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

// TestOpsWithoutTemporal: with no Temporal to reach, the commands say
// where they looked and how to point them elsewhere.
func TestOpsWithoutTemporal(t *testing.T) {
	addr := closedAddr(t)
	for _, args := range [][]string{
		{"failover", "--shard", "s"},
		{"switchover", "--shard", "s"},
		{"switchover", "--shard", "s", "--cron", "0 2 * * *"},
		{"durability", "--shard", "s", "--policy", "async"},
	} {
		start := time.Now()
		_, stderr, code := tessera(t, append(args, "--temporal", addr)...)
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
	dir := t.TempDir()
	addr := closedAddr(t)
	doc := `{"temporal": "` + addr + `", "etcd": [], "cluster": "default"}`
	if err := os.WriteFile(filepath.Join(dir, "cluster.json"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := tessera(t, "failover", "--shard", "s", "--data", dir)
	if code != 1 || !strings.Contains(stderr, "cannot reach Temporal at "+addr) {
		t.Fatalf("exit %d, stderr %q", code, stderr)
	}

}
