package pgmanager

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// clearLeftovers makes the data directory startable after whatever ended
// the previous run. A kill -9 of the whole process tree leaves a
// postmaster.pid whose PID may since belong to an unrelated process
// (Postgres would then refuse to start); a kill -9 of pgmanager alone
// leaves a postmaster that got SIGINT from the parent-death signal and is
// still shutting down, or one started by another Instance; a kill -9 of
// the postmaster alone leaves backends that hold its shared memory until
// they notice. Postgres processes found here are identified by their
// working directory (every one chdirs into PGDATA) and executable, never
// by name alone, so nothing else is ever signalled.
func (i *Instance) clearLeftovers(ctx context.Context) error {
	dataDir, err := filepath.EvalSymlinks(i.DataDir())
	if err != nil {
		return fmt.Errorf("pgmanager: %w", err)
	}
	pidFile := filepath.Join(dataDir, "postmaster.pid")
	procs := postgresProcsIn(dataDir)
	if pm := readPidFile(pidFile); pm > 0 && procs[pm] {
		i.log.Warn("a postgres from an earlier run still runs on our data directory; stopping it", "pid", pm)
		stop := make(chan struct{})
		err := i.terminate(ctx, pm, watchGone(pm, stop))
		close(stop)
		if err != nil {
			return fmt.Errorf("pgmanager: stopping leftover postgres (pid %d): %w", pm, err)
		}
		procs = postgresProcsIn(dataDir)
	}
	if len(procs) > 0 {
		// Orphaned children of a dead postmaster exit once they notice;
		// give them a moment, then kill them: the new postmaster cannot
		// start while they hold the old shared memory.
		i.log.Warn("waiting for orphaned postgres processes of a dead postmaster", "count", len(procs))
		deadline := time.Now().Add(5 * time.Second)
		for len(procs) > 0 && time.Now().Before(deadline) && ctx.Err() == nil {
			time.Sleep(50 * time.Millisecond)
			procs = postgresProcsIn(dataDir)
		}
		for pid := range procs {
			i.log.Warn("killing orphaned postgres process", "pid", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
		for deadline = time.Now().Add(5 * time.Second); len(procs) > 0 && time.Now().Before(deadline); {
			time.Sleep(20 * time.Millisecond)
			procs = postgresProcsIn(dataDir)
		}
		if len(procs) > 0 {
			return fmt.Errorf("pgmanager: %d postgres processes on %s survive SIGKILL", len(procs), dataDir)
		}
	}
	// No postgres of ours runs now, so any lock file is stale.
	sock := socketPath(i.cfg.Dir, i.cfg.Port)
	for _, f := range []string{pidFile, sock + ".lock", sock} {
		if err := os.Remove(f); err == nil {
			i.log.Info("removed stale file", "path", f)
		} else if !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("pgmanager: removing stale %s: %w", f, err)
		}
	}
	return nil
}

// readPidFile returns the PID on postmaster.pid's first line, 0 if none.
func readPidFile(path string) int {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0
	}
	first, _, _ := strings.Cut(string(b), "\n")
	pid, err := strconv.Atoi(strings.TrimSpace(first))
	if err != nil || pid <= 0 {
		return 0
	}
	return pid
}

// postgresProcsIn returns the live postgres processes whose working
// directory is dataDir.
func postgresProcsIn(dataDir string) map[int]bool {
	out := map[int]bool{}
	for _, p := range listProcs() {
		if p.state == 'Z' || p.pid == os.Getpid() {
			continue
		}
		dir := "/proc/" + strconv.Itoa(p.pid)
		cwd, err := os.Readlink(dir + "/cwd")
		if err != nil || cwd != dataDir {
			continue
		}
		exe, err := os.Readlink(dir + "/exe")
		if err != nil {
			continue
		}
		if filepath.Base(strings.TrimSuffix(exe, " (deleted)")) == "postgres" {
			out[p.pid] = true
		}
	}
	return out
}

type procInfo struct {
	pid, ppid int
	state     byte
}

// listProcs reads every process's pid, parent and state from /proc; it
// returns nothing where there is no /proc.
func listProcs() []procInfo {
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var out []procInfo
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if p, ok := readProc(pid); ok {
			out = append(out, p)
		}
	}
	return out
}

// readProc parses /proc/<pid>/stat: "pid (comm) state ppid ...", where
// comm may itself contain spaces and parentheses.
func readProc(pid int) (procInfo, bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return procInfo{}, false
	}
	s := string(b)
	r := strings.LastIndexByte(s, ')')
	if r < 0 {
		return procInfo{}, false
	}
	f := strings.Fields(s[r+1:])
	if len(f) < 2 {
		return procInfo{}, false
	}
	ppid, _ := strconv.Atoi(f[1])
	return procInfo{pid: pid, ppid: ppid, state: f[0][0]}, true
}

// alive reports whether pid exists and is not a zombie.
func alive(pid int) bool {
	p, ok := readProc(pid)
	return ok && p.state != 'Z'
}

// watchGone returns a channel closed once pid has exited (for a process
// that is not our child and so cannot be waited for), polling until stop
// is closed.
func watchGone(pid int, stop <-chan struct{}) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for alive(pid) {
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
		close(done)
	}()
	return done
}

// killTree SIGKILLs pid and its descendants. Postgres children make
// themselves process-group leaders, so a signal to the postmaster's group
// would not reach them; their parent links are what ties them together.
// Collecting them first matters: once the postmaster dies they are
// reparented and the link is gone. It returns the pids it signalled.
func killTree(pid int) []int {
	children := map[int][]int{}
	for _, p := range listProcs() {
		children[p.ppid] = append(children[p.ppid], p.pid)
	}
	var killed []int
	var kill func(int)
	kill = func(pid int) {
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed = append(killed, pid)
		}
		for _, c := range children[pid] {
			kill(c)
		}
	}
	kill(pid)
	return killed
}
