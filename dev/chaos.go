package dev

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
)

// Crash simulates the loss of an instance's host, for failover drills
// and tests: its postmaster gets SIGKILL (no shutdown checkpoint, and no
// restart by pgmanager) and its sidecar stops. Revive brings both back.
func (c *Cluster) Crash(ctx context.Context, instanceID string) error {
	in, pid, err := c.killPostmaster(instanceID)
	if err != nil {
		return err
	}
	// Stop keeps pgmanager from restarting the dead postmaster.
	in.pg.Stop(ctx)
	c.mu.Lock()
	sc := in.sc
	in.sc = nil
	c.mu.Unlock()
	if sc != nil {
		sc.Stop(ctx)
	}
	c.log.Info("instance crashed on purpose", "instance", instanceID, "pid", pid)
	return nil
}

// Revive starts a crashed instance's Postgres and sidecar again, as its
// host coming back would. What it rejoins as is the control plane's
// business: a former primary still believes it is one.
func (c *Cluster) Revive(ctx context.Context, instanceID string) error {
	in, shard, err := c.instance(instanceID)
	if err != nil {
		return err
	}
	if in.sc != nil {
		return fmt.Errorf("instance %s is running", instanceID)
	}
	if err := in.pg.Start(ctx); err != nil {
		return fmt.Errorf("starting postgres of %s: %w", instanceID, err)
	}
	return c.startSidecar(ctx, shard, in)
}

func (c *Cluster) instance(id string) (*instance, string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for uid, sh := range c.shards {
		for _, in := range sh.instances {
			if in.id == id {
				return in, uid, nil
			}
		}
	}
	return nil, "", errors.New("no instance " + id)
}

// Hang simulates a primary that stops answering while its host and
// sidecar stay up (a stalled disk, a stopped VM's guest, a runaway
// kernel): every process of the instance's Postgres gets SIGSTOP.
// resume sends them SIGCONT.
func (c *Cluster) Hang(instanceID string) (resume func() error, err error) {
	in, _, err := c.instance(instanceID)
	if err != nil {
		return nil, err
	}
	pid := in.pg.PID()
	if pid == 0 {
		return nil, fmt.Errorf("instance %s is not running", instanceID)
	}
	pids := append([]int{pid}, childrenOf(pid)...)
	signal := func(sig syscall.Signal) error {
		var first error
		for _, p := range pids {
			if err := syscall.Kill(p, sig); err != nil && first == nil && err != syscall.ESRCH {
				first = fmt.Errorf("signalling postgres process %d of %s: %w", p, instanceID, err)
			}
		}
		return first
	}
	if err := signal(syscall.SIGSTOP); err != nil {
		signal(syscall.SIGCONT)
		return nil, err
	}
	c.log.Info("instance hung on purpose", "instance", instanceID, "processes", len(pids))
	return func() error { return signal(syscall.SIGCONT) }, nil
}

// childrenOf lists the processes whose parent is pid, from /proc.
func childrenOf(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		child, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so parse
		// after its closing parenthesis.
		i := bytes.LastIndexByte(stat, ')')
		if i < 0 {
			continue
		}
		fields := strings.Fields(string(stat[i+1:]))
		if len(fields) > 1 && fields[1] == strconv.Itoa(pid) {
			out = append(out, child)
		}
	}
	return out
}

// KillPostgres sends SIGKILL to an instance's postmaster alone, as a
// crash of Postgres (not of its host) would: pgmanager restarts it in
// place and the sidecar stays.
func (c *Cluster) KillPostgres(instanceID string) error {
	_, pid, err := c.killPostmaster(instanceID)
	if err == nil {
		c.log.Info("postgres killed on purpose", "instance", instanceID, "pid", pid)
	}
	return err
}

// killPostmaster sends SIGKILL to an instance's running postmaster.
func (c *Cluster) killPostmaster(instanceID string) (*instance, int, error) {
	in, _, err := c.instance(instanceID)
	if err != nil {
		return nil, 0, err
	}
	pid := in.pg.PID()
	if pid == 0 {
		return nil, 0, fmt.Errorf("instance %s is not running", instanceID)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return nil, 0, fmt.Errorf("killing postgres of %s: %w", instanceID, err)
	}
	return in, pid, nil
}

// KillSidecar stops an instance's sidecar at once, as its process dying
// would: its connections to routers and its backends end (Postgres rolls
// back their open transactions; prepared ones stay), in-flight requests
// fail. Postgres keeps running. RestartSidecar brings it back.
func (c *Cluster) KillSidecar(instanceID string) error {
	in, _, err := c.instance(instanceID)
	if err != nil {
		return err
	}
	c.mu.Lock()
	sc := in.sc
	in.sc = nil
	c.mu.Unlock()
	if sc == nil {
		return fmt.Errorf("the sidecar of %s is not running", instanceID)
	}
	// A context already done: no graceful wait for in-flight requests.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	sc.Stop(ctx)
	c.log.Info("sidecar killed on purpose", "instance", instanceID)
	return nil
}

// RestartSidecar starts a killed sidecar again.
func (c *Cluster) RestartSidecar(ctx context.Context, instanceID string) error {
	in, shard, err := c.instance(instanceID)
	if err != nil {
		return err
	}
	c.mu.Lock()
	running := in.sc != nil
	c.mu.Unlock()
	if running {
		return fmt.Errorf("the sidecar of %s is running", instanceID)
	}
	return c.startSidecar(ctx, shard, in)
}
