package pgmanager

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// kill -9 of the postmaster: the supervisor notices and restarts it.
func TestCrashRestart(t *testing.T) {
	t.Parallel()
	inst := startPrimary(t, "crash", func(c *Config) { c.RestartOnCrash = true })
	execSQL(t, inst, "CREATE TABLE survives (id int); INSERT INTO survives VALUES (1), (2), (3)")
	pid := inst.PID()
	exited := inst.Exited()
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case <-exited:
	case <-time.After(5 * time.Second):
		t.Fatal("Exited not closed after the postmaster was killed")
	}
	eventually(t, 30*time.Second, "restart after crash", func() error {
		if p := inst.PID(); p == 0 || p == pid {
			return fmt.Errorf("postmaster pid %d", p)
		}
		got, err := query(inst, "SELECT count(*)::text FROM survives")
		if err != nil {
			return err
		}
		if got != "3" {
			return fmt.Errorf("%s rows", got)
		}
		return nil
	})
	// The old postmaster's children are gone too.
	if alive(pid) {
		t.Errorf("killed postmaster %d still alive", pid)
	}
}

// A postgres left running on the data directory by an earlier run (here:
// another Instance, as if our previous process had died), and a
// postmaster.pid naming a live process that is not postgres, do not stop
// a new Instance from starting.
func TestLeftovers(t *testing.T) {
	t.Parallel()
	old := startPrimary(t, "leftover", nil)
	execSQL(t, old, "CREATE TABLE t (id int); INSERT INTO t VALUES (42)")
	oldPID := old.PID()
	oldExited := old.Exited()

	cfg := old.Config()
	cfg.Logger = testLogger(t)
	inst, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, inst)
	ctx := testCtx(t)
	if err := inst.Start(ctx); err != nil {
		t.Fatal(err)
	}
	select {
	case <-oldExited:
	default:
		t.Fatal("the leftover postmaster still runs")
	}
	if inst.PID() == oldPID || mustQuery(t, inst, "SELECT id::text FROM t") != "42" {
		t.Fatal("not running our own postmaster on the same data")
	}

	if err := inst.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	pidFile := filepath.Join(inst.DataDir(), "postmaster.pid")
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"+inst.DataDir()+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := inst.Start(ctx); err != nil {
		t.Fatalf("Start with a stale postmaster.pid: %v", err)
	}
	if got := readPidFile(pidFile); got != inst.PID() {
		t.Fatalf("postmaster.pid names %d, want %d", got, inst.PID())
	}
}

// If the process that owns the Instance dies by kill -9, postgres does
// not outlive it: the parent-death signal makes it shut down. The owner
// is a child process running this test binary (TestHelperOwner).
func TestOwnerDeath(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(baseDir(t), "orphan")
	port := freePort(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperOwner$")
	cmd.Env = append(os.Environ(), "PGM_OWNER_DIR="+dir, "PGM_OWNER_PORT="+strconv.Itoa(port))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("owner process: %v", err)
	}
	var pid int
	if _, err := fmt.Sscanf(line, "postmaster %d", &pid); err != nil {
		t.Fatalf("owner process said %q", line)
	}
	if !alive(pid) {
		t.Fatal("postmaster not running")
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	cmd.Wait()
	dataDir := filepath.Join(dir, "data")
	t.Cleanup(func() { // should the test fail, leave nothing running
		if pm := readPidFile(filepath.Join(dataDir, "postmaster.pid")); pm > 0 && postgresProcsIn(dataDir)[pm] {
			killTree(pm)
		}
	})
	eventually(t, 20*time.Second, "postgres gone after its owner died", func() error {
		if procs := postgresProcesses(dataDir); len(procs) > 0 {
			return fmt.Errorf("still running: %v", procs)
		}
		return nil
	})
	// A new owner starts on the same directory.
	inst, err := New(Config{InstanceID: "orphan", Dir: dir, Port: port, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, inst)
	if err := inst.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := mustQuery(t, inst, "SELECT count(*)::text FROM owned"); got != "1" {
		t.Fatalf("%s rows", got)
	}
}

// TestHelperOwner is the owner process of TestOwnerDeath, not a test.
func TestHelperOwner(t *testing.T) {
	dir := os.Getenv("PGM_OWNER_DIR")
	if dir == "" {
		t.Skip("helper process for TestOwnerDeath")
	}
	port, _ := strconv.Atoi(os.Getenv("PGM_OWNER_PORT"))
	inst, err := New(Config{InstanceID: "orphan", Dir: dir, Port: port})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := inst.InitPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inst.Start(ctx); err != nil {
		t.Fatal(err)
	}
	if err := tryExec(inst, "CREATE TABLE owned (id int); INSERT INTO owned VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	// Busy goroutines, so the runtime has reasons to move things between
	// threads while the owner waits to be killed.
	for range 4 {
		go func() {
			for {
				runtime.Gosched()
				time.Sleep(time.Millisecond)
			}
		}()
	}
	fmt.Printf("postmaster %d\n", inst.PID())
	select {}
}

// A postmaster that ignores the fast shutdown (here: stopped with
// SIGSTOP) is escalated to SIGQUIT and then SIGKILL, with its children,
// before Stop's deadline; the next Start recovers.
func TestStopEscalates(t *testing.T) {
	t.Parallel()
	inst := startPrimary(t, "stuck", nil)
	execSQL(t, inst, "CREATE TABLE t (id int); INSERT INTO t VALUES (7)")
	pid := inst.PID()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	if err := inst.Stop(ctx); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if d := time.Since(start); d < time.Second || d > 3*time.Second {
		t.Errorf("Stop took %v; want escalation shortly before the 3s deadline", d)
	}
	if inst.Running() {
		t.Fatal("Running after Stop")
	}
	if procs := postgresProcesses(inst.DataDir()); len(procs) > 0 {
		t.Fatalf("left behind: %v", procs)
	}
	if err := inst.Start(testCtx(t)); err != nil {
		t.Fatal(err)
	}
	if got := mustQuery(t, inst, "SELECT id::text FROM t"); got != "7" {
		t.Fatalf("after recovery: %s", got)
	}
}

// TestCrashBackoff: the first crash in a minute is restarted at once
// (clients wait on it); a crash loop backs off up to 10 s.
func TestCrashBackoff(t *testing.T) {
	var i Instance
	var got []time.Duration
	for range 7 {
		got = append(got, i.nextBackoffLocked())
	}
	want := []time.Duration{0, time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 10 * time.Second, 10 * time.Second}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("restart delays %v, want %v", got, want)
	}
	i.lastCrash = time.Now().Add(-2 * time.Minute)
	if d := i.nextBackoffLocked(); d != 0 {
		t.Fatalf("a crash a minute after the last one waits %v, want 0", d)
	}
}
