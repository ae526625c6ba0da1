package pgmanager

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
)

// process is one run of the postmaster.
type process struct {
	pid       int
	logOffset int64         // size of postgres.log when it started: its own output follows
	done      chan struct{} // closed when it has exited and been reaped
	err       error         // how it exited; valid once done is closed
	exited    bool          // guarded by Instance.mu, like stopping
	stopping  bool          // Stop signalled it: its exit is not a crash
}

// Start starts postgres (if it is not running) and waits until it accepts
// connections on the unix socket. It runs `postgres -D Dir/data` as a
// child process, not through pg_ctl, so that pgmanager's supervisor is
// the one to notice when it exits. Before starting it rewrites
// tessera.conf and pg_hba.conf from the Config and clears what a killed
// predecessor left behind (see clearLeftovers). If postgres exits during
// startup the error quotes postgres.log, and no crash restart follows
// until Start is called again. If ctx ends first, postgres is left
// starting (crash recovery may legitimately take long) and a later Start
// waits for it again. Start on a running instance just waits until it
// accepts connections.
func (i *Instance) Start(ctx context.Context) error {
	i.opMu.Lock()
	p, err := i.startLocked(ctx)
	i.opMu.Unlock()
	if err != nil {
		return err
	}
	return i.waitReady(ctx, p)
}

// startLocked spawns the postmaster unless one of ours is running; the
// caller holds opMu.
func (i *Instance) startLocked(ctx context.Context) (*process, error) {
	i.mu.Lock()
	if err := i.closedErr(); err != nil {
		i.mu.Unlock()
		return nil, err
	}
	if p := i.proc; p != nil && !p.exited {
		i.wantRunning = true
		i.mu.Unlock()
		return p, nil
	}
	i.cancelRestartLocked()
	i.mu.Unlock()

	if !i.Initialized() {
		return nil, fmt.Errorf("pgmanager: %s is not initialized: call InitPrimary or InitReplica first", i.DataDir())
	}
	if err := i.prepareDir(); err != nil {
		return nil, err
	}
	if err := i.writeDataConf(i.DataDir()); err != nil {
		return nil, err
	}
	if err := i.clearLeftovers(ctx); err != nil {
		return nil, err
	}
	p, err := i.spawn()
	if err != nil {
		return nil, err
	}
	i.mu.Lock()
	i.proc = p
	i.wantRunning = true
	i.mu.Unlock()
	return p, nil
}

// spawn starts the postmaster and the goroutine that supervises it.
func (i *Instance) spawn() (*process, error) {
	logf, err := os.OpenFile(i.logPath(), os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
	if err != nil {
		return nil, fmt.Errorf("pgmanager: %w", err)
	}
	defer logf.Close() // the child has its own descriptor once started
	off, _ := logf.Seek(0, io.SeekEnd)
	fmt.Fprintf(logf, "%s pgmanager: starting postgres\n", time.Now().Format(time.RFC3339))

	cmd := exec.Command(i.bin.path("postgres"), "-D", i.DataDir())
	cmd.Dir = i.DataDir()
	cmd.Env = i.childEnv()
	// postgres writes straight into the file, not through a pipe of ours,
	// so its logging does not depend on this process staying alive.
	cmd.Stdout, cmd.Stderr = logf, logf
	// SIGINT, fast shutdown, if pgmanager dies: running transactions are
	// rolled back but nothing needs crash recovery.
	cmd.SysProcAttr = i.sysProcAttr(syscall.SIGINT)
	p := &process{logOffset: off, done: make(chan struct{})}

	started := make(chan error, 1)
	i.wg.Add(1)
	go func() {
		defer i.wg.Done()
		// The parent-death signal is tied to the thread that forked: lock
		// this goroutine to it until postgres has exited, so the Go
		// runtime never retires that thread under a live postgres.
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		p.pid = cmd.Process.Pid
		started <- nil
		i.supervise(p, cmd.Wait())
	}()
	if err := <-started; err != nil {
		return nil, fmt.Errorf("pgmanager: starting postgres: %w", err)
	}
	i.log.Info("postgres started", "pid", p.pid, "port", i.cfg.Port)
	return p, nil
}

// supervise records the postmaster's exit. An exit that Stop did not ask
// for is a crash: it is logged with the end of postgres.log and, with
// RestartOnCrash, answered by a restart after a backoff.
func (i *Instance) supervise(p *process, err error) {
	i.mu.Lock()
	p.err = err
	p.exited = true
	close(p.done)
	crash := !p.stopping && i.wantRunning && !i.closed
	var delay time.Duration
	if crash && i.cfg.RestartOnCrash {
		delay = i.nextBackoffLocked()
		i.scheduleRestartLocked(delay)
	}
	i.mu.Unlock()

	switch {
	case !crash:
		i.log.Info("postgres exited", "pid", p.pid, "status", exitStatus(err))
	case i.cfg.RestartOnCrash:
		i.log.Error("postgres exited unexpectedly; restarting", "pid", p.pid, "status", exitStatus(err),
			"in", delay, "log", i.logTail(p.logOffset))
	default:
		i.log.Error("postgres exited unexpectedly", "pid", p.pid, "status", exitStatus(err),
			"log", i.logTail(p.logOffset))
	}
}

// nextBackoffLocked is the delay before a crash restart: none for the
// first crash in a minute, then 1s, doubling up to 10s. The first restart
// is immediate because clients wait on it: a primary restarted in place
// takes no writes meanwhile, and under sync durability no commit either
// until a replica has reconnected. A crash loop still backs off.
func (i *Instance) nextBackoffLocked() time.Duration {
	now := time.Now()
	first := now.Sub(i.lastCrash) > time.Minute
	i.lastCrash = now
	if first {
		i.backoff = 0
		return 0
	}
	i.backoff = min(max(2*i.backoff, time.Second), 10*time.Second)
	return i.backoff
}

func (i *Instance) scheduleRestartLocked(d time.Duration) {
	i.cancelRestartLocked()
	i.wg.Add(1)
	i.restart = time.AfterFunc(d, func() {
		defer i.wg.Done()
		i.crashRestart()
	})
}

func (i *Instance) cancelRestartLocked() {
	if i.restart != nil && i.restart.Stop() {
		i.wg.Done() // the timer's function will never run
	}
	i.restart = nil
}

// crashRestart is the restart after a crash. It does not wait for
// readiness: nobody waits on it, and a postgres that dies again is a new
// crash with a longer backoff.
func (i *Instance) crashRestart() {
	i.opMu.Lock()
	defer i.opMu.Unlock()
	i.mu.Lock()
	i.restart = nil
	ok := !i.closed && i.wantRunning && (i.proc == nil || i.proc.exited)
	i.mu.Unlock()
	if !ok {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := i.startLocked(ctx); err != nil {
		i.mu.Lock()
		if !i.closed && i.wantRunning {
			d := i.nextBackoffLocked()
			i.scheduleRestartLocked(d)
			i.log.Error("restart after crash failed; retrying", "err", err, "in", d)
		}
		i.mu.Unlock()
	}
}

// waitReady polls the unix socket until postgres accepts a connection, p
// exits, or ctx ends.
func (i *Instance) waitReady(ctx context.Context, p *process) error {
	var lastErr error
	for {
		cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		conn, err := pgconn.Connect(cctx, i.ConnConfig("postgres", "postgres")+" application_name=pgmanager")
		cancel()
		if err == nil {
			conn.Close(ctx)
			return nil
		}
		lastErr = err
		select {
		case <-p.done:
			// The caller learns of this failure from the error; a crash
			// restart behind its back would contradict it.
			i.mu.Lock()
			if i.proc == p {
				i.wantRunning = false
				i.cancelRestartLocked()
			}
			i.mu.Unlock()
			return errors.New(withLog(fmt.Sprintf("pgmanager: postgres exited during startup (%s)", exitStatus(p.err)),
				i.logTail(p.logOffset)))
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", withLog(fmt.Sprintf("pgmanager: postgres did not accept connections (last attempt: %v)", lastErr),
				i.logTail(p.logOffset)), ctx.Err())
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// Stop shuts postgres down with a fast shutdown (SIGINT: sessions are
// disconnected, transactions rolled back, a shutdown checkpoint written)
// and waits for it to exit. If ctx has a deadline and it comes near, Stop
// escalates to an immediate shutdown (SIGQUIT, crash recovery at the next
// start) and finally SIGKILL for the postmaster and its children. Stop
// on a stopped instance returns nil, and no crash restart follows it.
func (i *Instance) Stop(ctx context.Context) error {
	i.opMu.Lock()
	defer i.opMu.Unlock()
	return i.stopLocked(ctx)
}

func (i *Instance) stopLocked(ctx context.Context) error {
	i.mu.Lock()
	i.wantRunning = false
	i.cancelRestartLocked()
	p := i.proc
	if p == nil || p.exited {
		i.mu.Unlock()
		return nil
	}
	p.stopping = true
	i.mu.Unlock()
	i.log.Info("stopping postgres", "pid", p.pid)
	return i.terminate(ctx, p.pid, p.done)
}

// terminate stops the postmaster pid (ours, or a leftover of an earlier
// run) and waits until done is closed. See Stop for the escalation.
func (i *Instance) terminate(ctx context.Context, pid int, done <-chan struct{}) error {
	signal := func(sig syscall.Signal) {
		if err := syscall.Kill(pid, sig); err != nil && !errors.Is(err, syscall.ESRCH) {
			i.log.Warn("signalling postgres", "pid", pid, "signal", sig, "err", err)
		}
	}
	signal(syscall.SIGINT)
	var quitC, killC <-chan time.Time
	if deadline, ok := ctx.Deadline(); ok {
		// Leave the immediate shutdown half the remaining time (at most
		// 5s) and SIGKILL a quarter (at most 1s) before the deadline.
		rem := time.Until(deadline)
		quit := time.NewTimer(rem - min(rem/2, 5*time.Second))
		kill := time.NewTimer(rem - min(rem/4, time.Second))
		defer quit.Stop()
		defer kill.Stop()
		quitC, killC = quit.C, kill.C
	}
	// After a SIGKILL the postmaster cannot wait for its children; Stop
	// must, so that nothing runs when it returns.
	var killed []int
	for {
		select {
		case <-done:
			return waitGone(killed)
		case <-quitC:
			i.log.Warn("postgres is slow to shut down; immediate shutdown (SIGQUIT)", "pid", pid)
			signal(syscall.SIGQUIT)
		case <-killC:
			i.log.Warn("postgres is still running; SIGKILL", "pid", pid)
			killed = killTree(pid)
		case <-ctx.Done():
			killed = killTree(pid)
			select {
			case <-done:
				i.log.Warn("postgres killed: the context ended before it shut down", "pid", pid)
				return waitGone(killed)
			case <-time.After(5 * time.Second):
				return fmt.Errorf("pgmanager: postgres (pid %d) did not exit even after SIGKILL: %w", pid, ctx.Err())
			}
		}
	}
}

// waitGone waits briefly for SIGKILLed processes to be gone (or zombies,
// which hold nothing).
func waitGone(pids []int) error {
	deadline := time.Now().Add(5 * time.Second)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				return fmt.Errorf("pgmanager: postgres process %d survives SIGKILL", pid)
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	return nil
}

// Restart stops and starts postgres, for settings that need a restart.
func (i *Instance) Restart(ctx context.Context) error {
	i.opMu.Lock()
	err := i.stopLocked(ctx)
	var p *process
	if err == nil {
		p, err = i.startLocked(ctx)
	}
	i.opMu.Unlock()
	if err != nil {
		return err
	}
	return i.waitReady(ctx, p)
}

// Running reports whether a postmaster started by this Instance is alive
// (it may still be starting up).
func (i *Instance) Running() bool {
	i.mu.Lock()
	defer i.mu.Unlock()
	return i.proc != nil && !i.proc.exited
}

// PID is the process id of the running postmaster, 0 if none.
func (i *Instance) PID() int {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.proc == nil || i.proc.exited {
		return 0
	}
	return i.proc.pid
}

var closedChan = func() chan struct{} { c := make(chan struct{}); close(c); return c }()

// Exited returns a channel that is closed when the most recently started
// postmaster exits, for whatever reason; before the first start it is
// already closed. The sidecar waits on it to notice a crash, then checks
// Running (or calls Exited again) to follow a crash restart.
func (i *Instance) Exited() <-chan struct{} {
	i.mu.Lock()
	defer i.mu.Unlock()
	if i.proc == nil {
		return closedChan
	}
	return i.proc.done
}

// Close stops postgres and the supervisor. After Close returns nil,
// nothing of this Instance runs: no postgres, no goroutine, no pending
// restart. Later lifecycle calls return ErrClosed; Close itself may be
// called again.
func (i *Instance) Close(ctx context.Context) error {
	i.mu.Lock()
	i.closed = true
	i.cancelRestartLocked()
	i.mu.Unlock()
	if err := i.Stop(ctx); err != nil {
		return err
	}
	idle := make(chan struct{})
	go func() { i.wg.Wait(); close(idle) }()
	select {
	case <-idle:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("pgmanager: waiting for the supervisor to finish: %w", ctx.Err())
	}
}

// exitStatus describes how a process ended.
func exitStatus(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}
