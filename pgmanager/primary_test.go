package pgmanager

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func TestPrimaryLifecycle(t *testing.T) {
	t.Parallel()
	const password = "lifecycle secret"
	inst := newInstance(t, baseDir(t), "life", func(c *Config) {
		c.SuperuserPassword = password
		c.Settings = map[string]string{"work_mem": "8MB", "max_connections": "50"}
	})
	ctx := testCtx(t)
	if st, err := inst.Status(ctx); err != nil || st.Running || st.Role != "" {
		t.Fatalf("Status before init = %+v, %v", st, err)
	}
	if err := inst.InitPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	if !inst.Initialized() {
		t.Fatal("not Initialized after InitPrimary")
	}
	sysid := func() string { return mustQuery(t, inst, "SELECT system_identifier::text FROM pg_control_system()") }

	// The password is in no file but pgpass, and initdb's pwfile is gone.
	dir := inst.Config().Dir
	filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || p == inst.pgpassPath() {
			return nil
		}
		if b, err := os.ReadFile(p); err == nil && strings.Contains(string(b), password) {
			t.Errorf("%s contains the superuser password", p)
		}
		return nil
	})
	if exists(filepath.Join(dir, ".initdb-pwfile")) || exists(inst.partialDir()) {
		t.Error("initdb leftovers remain")
	}

	if err := inst.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if !inst.Running() || inst.PID() == 0 {
		t.Fatal("not Running after Start")
	}
	pid := inst.PID()
	sys := sysid()

	// Files and modes the design relies on.
	for path, want := range map[string]os.FileMode{inst.SocketDir(): 0o700, inst.pgpassPath(): 0o600, inst.DataDir(): 0o700} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != want {
			t.Errorf("%s has mode %v, want %v", path, st.Mode().Perm(), want)
		}
		if os.Geteuid() == 0 {
			if uid := st.Sys().(*syscall.Stat_t).Uid; uid != inst.user.uid {
				t.Errorf("%s is owned by uid %d, want %d (%s)", path, uid, inst.user.uid, inst.user.name)
			}
		}
	}

	// Over the socket, no password; settings applied.
	for sql, want := range map[string]string{
		"SHOW wal_level":                 "logical",
		"SHOW data_checksums":            "on",
		"SHOW max_prepared_transactions": "50", // follows max_connections
		"SHOW hot_standby_feedback":      "on",
		"SHOW unix_socket_permissions":   "0700",
		"SHOW server_encoding":           "UTF8",
		"SHOW lc_collate":                "C",
		"SHOW password_encryption":       "scram-sha-256",
		"SHOW logging_collector":         "off",
		"SHOW work_mem":                  "8MB", // Config.Settings override defaults
		"SHOW max_connections":           "50",
		"SHOW cluster_name":              "life",
		"SELECT (current_setting('port') = '" + strconv.Itoa(inst.Port()) + "')::text":                "true",
		"SELECT (rolpassword LIKE 'SCRAM-SHA-256$%')::text FROM pg_authid WHERE rolname = 'postgres'": "true",
	} {
		if got := mustQuery(t, inst, sql); got != want {
			t.Errorf("%s = %q, want %q", sql, got, want)
		}
	}
	execSQL(t, inst, "CREATE TABLE kept (id int PRIMARY KEY); INSERT INTO kept VALUES (1), (2)")

	// Over TCP the password is required and checked with SCRAM.
	c, err := dialTCP(ctx, inst, password)
	if err != nil {
		t.Fatalf("TCP with the right password: %v", err)
	}
	var method string
	if err := c.QueryRow(ctx, "SELECT count(*)::text FROM kept").Scan(&method); err != nil || method != "2" {
		t.Errorf("query over TCP: %q, %v", method, err)
	}
	c.Close(ctx)
	_, err = dialTCP(ctx, inst, "wrong")
	wantSQLState(t, err, "28P01")

	// Idempotence: a second InitPrimary and Start change nothing.
	if err := inst.InitPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inst.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if inst.PID() != pid || sysid() != sys {
		t.Fatal("second InitPrimary or Start replaced the running cluster")
	}
	st, err := inst.Status(ctx)
	if err != nil || !st.Running || st.Role != RolePrimary || st.Timeline != 1 || st.CurrentLSN == 0 || st.Fenced {
		t.Fatalf("Status = %+v, %v", st, err)
	}

	// Stop, twice; Start again; the data survives.
	exited := inst.Exited()
	if err := inst.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	default:
		t.Error("Exited not closed after Stop")
	}
	if err := inst.Stop(ctx); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if inst.Running() || inst.PID() != 0 {
		t.Fatal("Running after Stop")
	}
	if st, err := inst.Status(ctx); err != nil || st.Running || st.Role != RolePrimary {
		t.Fatalf("Status when stopped = %+v, %v", st, err)
	}
	if err := inst.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if got := mustQuery(t, inst, "SELECT count(*)::text FROM kept"); got != "2" || sysid() != sys {
		t.Fatalf("after restart: %s rows", got)
	}
	pid = inst.PID()
	if err := inst.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if inst.PID() == pid || mustQuery(t, inst, "SELECT count(*)::text FROM kept") != "2" {
		t.Fatal("Restart did not restart, or lost data")
	}

	if err := inst.Close(ctx); err != nil {
		t.Fatal(err)
	}
	if procs := postgresProcesses(inst.DataDir()); len(procs) > 0 {
		t.Fatalf("after Close: %v", procs)
	}
	if err := inst.Start(ctx); !errors.Is(err, ErrClosed) {
		t.Fatalf("Start after Close: %v", err)
	}
	if err := inst.Close(ctx); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// A port someone else listens on makes Start fail with postgres's reason.
func TestStartFailureQuotesLog(t *testing.T) {
	t.Parallel()
	inst := startPrimary(t, "busy", nil)
	other := newInstance(t, baseDir(t), "busy2", func(c *Config) { c.Port = inst.Port() })
	ctx := testCtx(t)
	if err := other.InitPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	err := other.Start(ctx)
	if err == nil || !strings.Contains(err.Error(), "exited during startup") || !strings.Contains(err.Error(), "could not") {
		t.Fatalf("Start on a busy port: %v", err)
	}
	if other.Running() {
		t.Fatal("Running after a failed start")
	}
}
