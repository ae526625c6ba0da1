package fidelity_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/tesseradb/tessera/dev"
)

// TestPgbench initializes pgbench's tables through the router and runs its
// select-only, extended-protocol and prepared workloads without errors.
func TestPgbench(t *testing.T) {
	pgbench, _ := filepath.Glob("/usr/lib/postgresql/*/bin/pgbench")
	if len(pgbench) == 0 {
		t.Skip("pgbench is not installed")
	}
	base, err := os.MkdirTemp("", "pgbench-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	os.Chmod(base, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cluster, err := dev.Start(ctx, dev.Config{
		DataDir: filepath.Join(base, "data"), Shards: 1, NoReplicas: true,
		BasePort: dev.TestPort(29533), EtcdPort: -1, RouterPort: -1,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Stop(context.Background())
	host, port, _ := strings.Cut(cluster.Info().Router, ":")
	run := func(args ...string) string {
		t.Helper()
		cmd := exec.CommandContext(ctx, pgbench[len(pgbench)-1], append([]string{"-h", host, "-p", port, "-U", "postgres"}, append(args, "postgres")...)...)
		cmd.Env = append(os.Environ(), "PGPASSWORD=postgres")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("pgbench %v: %v\n%s", args, err, out)
		}
		return string(out)
	}
	run("-i", "-s", "1", "-q")
	processed := regexp.MustCompile(`number of transactions actually processed: ([1-9][0-9]*)`)
	for _, mode := range [][]string{{"-S"}, {"-M", "extended"}, {"-M", "prepared"}, {"-S", "-M", "prepared"}} {
		out := run(append(mode, "-T", "2", "-c", "4", "-n")...)
		if !processed.MatchString(out) || !strings.Contains(out, "number of failed transactions: 0 ") {
			t.Errorf("pgbench %v:\n%s", mode, out)
		}
	}
}
