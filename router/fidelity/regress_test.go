package fidelity_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/dev"
)

// findRegress looks for shared/pg_regress/run.sh beside the repository
// (where CI and development machines keep shared/).
func findRegress() string {
	dir, _ := filepath.Abs(".")
	for i := 0; i < 6; i++ {
		p := filepath.Join(dir, "shared", "pg_regress", "run.sh")
		if _, err := os.Stat(p); err == nil {
			return p
		}
		dir = filepath.Dir(dir)
	}
	return ""
}

// TestPgRegress runs PostgreSQL 15's regression files through the router
// in front of a one-shard cluster, where every query string goes to that
// shard as it came.
func TestPgRegress(t *testing.T) {
	runRegress(t, dev.Config{Shards: 1, BasePort: dev.TestPort(29433)})
}

// TestPgRegressMultiShard runs them on three shards whose topology shards
// two other tables of the regress database over shard-1 and shard-2 and
// leaves every table the regression files make in the authoritative group
// on shard-0. Those tables must behave exactly as on one Postgres while
// DDL reaches every shard and statements are planned one by one.
func TestPgRegressMultiShard(t *testing.T) {
	runRegress(t, dev.Config{Shards: 1, BasePort: dev.TestPort(29533),
		TopologyFile: "../../testdata/topologies/regress_sharded.json"})
}

// missing skips a test for want of something outside the repository,
// except in CI (CI=true), which must run what the suite claims to cover.
func missing(t *testing.T, what string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s, and CI=true: this test must run in CI", what)
	}
	t.Skip(what)
}

func runRegress(t *testing.T, cfg dev.Config) {
	script := findRegress()
	if script == "" {
		missing(t, "shared/pg_regress is not beside the repository")
	}
	if _, err := exec.LookPath("psql"); err != nil {
		missing(t, "psql is not installed")
	}
	base, err := os.MkdirTemp("", "fidelity-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	os.Chmod(base, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cfg.DataDir = filepath.Join(base, "data")
	cfg.NoReplicas, cfg.EtcdPort, cfg.RouterPort = true, -1, -1
	cluster, err := dev.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer cluster.Stop(context.Background())
	router := cluster.Info().Router
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@%s/postgres?sslmode=disable", router))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "CREATE DATABASE regress"); err != nil {
		t.Fatal(err)
	}
	conn.Close(ctx)

	host, port, _ := strings.Cut(router, ":")
	cmd := exec.CommandContext(ctx, "bash", script)
	cmd.Env = append(os.Environ(), "PGHOST="+host, "PGPORT="+port, "PGUSER=postgres", "PGPASSWORD=postgres",
		"PGDATABASE=regress", "ACC_TMP="+base)
	out, err := cmd.CombinedOutput()
	t.Logf("%s", out)
	if err != nil || !strings.Contains(string(out), "40 of 40 tests passed") || strings.Contains(string(out), "FAILED") {
		diffs, _ := os.ReadFile(filepath.Join(base, "pg_regress", "regression.diffs"))
		if len(diffs) > 8000 {
			diffs = diffs[:8000]
		}
		t.Fatalf("pg_regress through the router failed (%v):\n%s", err, diffs)
	}
}
