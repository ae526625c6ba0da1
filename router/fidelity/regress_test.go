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

// TestPgRegress runs PostgreSQL 15's regression files through the router.
func TestPgRegress(t *testing.T) {
	script := findRegress()
	if script == "" {
		t.Skip("shared/pg_regress is not beside the repository")
	}
	if _, err := exec.LookPath("psql"); err != nil {
		t.Skip("psql is not installed")
	}
	base, err := os.MkdirTemp("", "fidelity-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	os.Chmod(base, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	cluster, err := dev.Start(ctx, dev.Config{
		DataDir:    filepath.Join(base, "data"),
		Shards:     1,
		NoReplicas: true,
		BasePort:   29433,
		EtcdPort:   -1,
		RouterPort: -1,
	})
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
	if err != nil || !strings.Contains(string(out), "of 40 tests passed") || strings.Contains(string(out), "FAILED") {
		diffs, _ := os.ReadFile(filepath.Join(base, "pg_regress", "regression.diffs"))
		if len(diffs) > 8000 {
			diffs = diffs[:8000]
		}
		t.Fatalf("pg_regress through the router failed (%v):\n%s", err, diffs)
	}
}
