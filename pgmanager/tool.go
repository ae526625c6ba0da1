package pgmanager

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// childEnv is the environment of every Postgres binary pgmanager runs:
// ours without PG* variables (a stray PGDATA or PGHOST would redirect a
// tool) and locale variables (LC_ALL=C keeps tool messages in English
// for postgres.log), with HOME and USER of the OS user.
func (i *Instance) childEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch {
		case strings.HasPrefix(k, "PG"), strings.HasPrefix(k, "LC_"),
			k == "LANG", k == "LANGUAGE", k == "HOME", k == "USER", k == "LOGNAME":
			continue
		}
		env = append(env, kv)
	}
	return append(env, "LC_ALL=C", "HOME="+i.user.home, "USER="+i.user.name, "LOGNAME="+i.user.name)
}

// sysProcAttr puts a child in its own process group (a signal to ours, such
// as a terminal's Ctrl-C, must not reach Postgres directly: pgmanager
// decides how it stops), runs it as the OS user, and makes it receive
// deathSig if pgmanager dies.
func (i *Instance) sysProcAttr(deathSig syscall.Signal) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{Setpgid: true, Credential: i.user.cred}
	setDeathSignal(a, deathSig)
	return a
}

// runTool runs one of the Postgres binaries (initdb, pg_basebackup,
// pg_rewind) to completion as the OS user, in Dir, with its output
// appended to postgres.log. A failure's error carries the end of the
// output. Cancelling ctx kills the tool's whole process group (pg_rewind
// may have started a single-user postgres).
func (i *Instance) runTool(ctx context.Context, tool string, args ...string) error {
	cmd := exec.CommandContext(ctx, i.bin.path(tool), args...)
	cmd.Dir = i.cfg.Dir
	cmd.Env = i.childEnv()
	cmd.SysProcAttr = i.sysProcAttr(syscall.SIGKILL)
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	tail := &tailBuffer{max: 8 << 10}
	var out io.Writer = tail
	if f, err := os.OpenFile(i.logPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600); err == nil {
		defer f.Close()
		fmt.Fprintf(f, "%s pgmanager: running %s %s\n", time.Now().Format(time.RFC3339), tool, strings.Join(args, " "))
		out = io.MultiWriter(f, tail)
	}
	cmd.Stdout, cmd.Stderr = out, out
	i.log.Info("running "+tool, "args", args)
	start := time.Now()
	// The death signal follows the starting thread: keep this goroutine
	// on it until the tool has exited.
	runtime.LockOSThread()
	err := cmd.Run()
	runtime.UnlockOSThread()
	if err != nil {
		if ctx.Err() != nil {
			err = fmt.Errorf("%w (%w)", ctx.Err(), err)
		}
		if t := tail.String(); t != "" {
			return fmt.Errorf("pgmanager: %s failed: %w; its output ends with:\n%s", tool, err, t)
		}
		return fmt.Errorf("pgmanager: %s failed: %w", tool, err)
	}
	i.log.Info(tool+" done", "elapsed", time.Since(start).Round(time.Millisecond))
	return nil
}
