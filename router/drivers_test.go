package router_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Drivers other than pgx run as scripts in testdata/drivers, against the
// router and against Postgres directly; their transcripts must be equal.
// CI installs them (.ci/run): there a missing driver fails the test.

// needDriver skips the test when a driver is missing, except in CI.
func needDriver(t *testing.T, what string, check *exec.Cmd) {
	t.Helper()
	out, err := check.CombinedOutput()
	if err == nil {
		return
	}
	msg := what + " is not installed (" + strings.TrimSpace(string(out)) + "): see .ci/run for how CI installs it"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg)
	}
	t.Skip(msg)
}

// python is Debian's interpreter, which has python3-psycopg (a python3 on
// PATH may be another one).
const python = "/usr/bin/python3"

func needPsycopg(t *testing.T) {
	needDriver(t, "psycopg 3 (apt-get install python3-psycopg)", exec.Command(python, "-c", "import psycopg"))
}

func needNodePostgres(t *testing.T) {
	check := exec.Command("node", "-e", "require('pg')")
	check.Dir = filepath.Join("testdata", "drivers")
	needDriver(t, "node-postgres (npm ci in router/testdata/drivers)", check)
}

// compareDriver runs the script (argv, then the DSN) against Postgres
// and against the router, in a database of that name, and compares.
func compareDriver(t *testing.T, db string, argv ...string) {
	t.Helper()
	viaRouter, viaPostgres := driverDatabase(t, db)
	compareDriverOn(t, viaRouter, viaPostgres, argv...)
}

func compareDriverOn(t *testing.T, viaRouter, viaPostgres string, argv ...string) {
	t.Helper()
	run := func(dsn string) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, argv[0], append(argv[1:], dsn)...)
		cmd.Dir = filepath.Join("testdata", "drivers")
		// Only what the script prints is compared: a driver's own log
		// lines on stderr (psycopg reports a pipeline it closes during
		// garbage collection, whenever that runs) vary from run to run.
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Errorf("%s against %s: %v\n%s%s", argv[len(argv)-1], dsn, err, out, stderr.String())
		} else if stderr.Len() > 0 {
			t.Logf("%s against %s, its stderr:\n%s", argv[len(argv)-1], dsn, stderr.String())
		}
		return string(out)
	}
	want := run(viaPostgres)
	got := run(viaRouter)
	t.Logf("Postgres's transcript:\n%s", want)
	if strings.TrimSpace(want) == "" {
		t.Error("the script printed nothing")
	}
	if got != want {
		t.Errorf("through the router:\n%s\nPostgres:\n%s", got, want)
	}
}

// TestPsycopgRollsBackAfterAnError: psycopg 3's rollback() after an error
// inside its transaction brings the connection back (issue #19).
func TestPsycopgRollsBackAfterAnError(t *testing.T) {
	needPsycopg(t)
	compareDriver(t, "psycopg_rollback", python, "psycopg_rollback.py")
	// The store database, whose sharded customers spread a transaction
	// over several shards, against shard-0's copy of it directly.
	mustExec(t, connect(t, "store"), "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)")
	compareDriverOn(t, dsn("store"), shardDSN(t, "shard-0", "store"), python, "psycopg_rollback_shards.py")
}

// TestNodePostgresPreparedStatementsAreListed: a statement node-postgres
// prepares by name once and binds many times is in pg_prepared_statements
// for the session (issue #19).
func TestNodePostgresPreparedStatementsAreListed(t *testing.T) {
	needNodePostgres(t)
	compareDriver(t, "node_prepared", "node", "node_prepared.js")
}
