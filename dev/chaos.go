package dev

import (
	"context"
	"errors"
	"fmt"
	"syscall"
)

// Crash simulates the loss of an instance's host, for failover drills
// and tests: its postmaster gets SIGKILL (no shutdown checkpoint, and no
// restart by pgmanager) and its sidecar stops. Revive brings both back.
func (c *Cluster) Crash(ctx context.Context, instanceID string) error {
	in, _, err := c.instance(instanceID)
	if err != nil {
		return err
	}
	pid := in.pg.PID()
	if pid == 0 {
		return fmt.Errorf("instance %s is not running", instanceID)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("killing postgres of %s: %w", instanceID, err)
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
