package pgmanager

import (
	"context"
	"fmt"
)

// Rewind turns this instance, typically a former primary that is crashed,
// stopped or still running, into a replica of primary. It stops postgres,
// clears what a crash left behind, ensures this instance's slot on the
// new primary (before the rewind, so the WAL from there on is kept), and
// runs pg_rewind, which copies from the new primary only what changed
// since the histories forked; writes the old primary made after the fork
// are discarded. pg_rewind (Postgres 13+) first runs crash recovery in
// single-user mode when the instance was not shut down cleanly, and it
// says "no rewind required" when the histories have not forked. pg_rewind
// also copies the new primary's configuration files, so pgmanager's go
// back on top: tessera.conf, pg_hba.conf, standby settings and
// standby.signal, without the new primary's fence or synchronous
// standbys. Then postgres starts and, once it accepts connections,
// replication slots inherited from the instance's time as a primary are
// dropped (on a replica they would pin WAL for replicas that no longer
// use them).
func (i *Instance) Rewind(ctx context.Context, primary Endpoint) error {
	if err := primary.validate(); err != nil {
		return err
	}
	i.opMu.Lock()
	p, err := i.rewindLocked(ctx, primary)
	i.opMu.Unlock()
	if err != nil {
		return err
	}
	if err := i.waitReady(ctx, p); err != nil {
		return err
	}
	return i.dropStaleSlots(ctx)
}

func (i *Instance) rewindLocked(ctx context.Context, primary Endpoint) (*process, error) {
	if err := i.checkOpen(); err != nil {
		return nil, err
	}
	if !i.Initialized() {
		return nil, fmt.Errorf("pgmanager: Rewind: %s is not initialized", i.DataDir())
	}
	if err := i.stopLocked(ctx); err != nil {
		return nil, err
	}
	if err := i.prepareDir(); err != nil {
		return nil, err
	}
	if err := i.clearLeftovers(ctx); err != nil {
		return nil, err
	}
	if err := i.ensureSlot(ctx, primary); err != nil {
		return nil, err
	}
	if err := i.checkpointIfPromoted(ctx, primary); err != nil {
		return nil, err
	}
	i.log.Info("rewinding to follow a new primary", "primary", primary)
	err := i.runTool(ctx, "pg_rewind",
		"--target-pgdata="+i.DataDir(),
		"--source-server="+i.primaryConnInfo(primary, i.cfg.InstanceID+"_rewind")+" dbname=postgres",
	)
	if err != nil {
		return nil, err
	}
	if err := i.scrubAutoConf(i.DataDir()); err != nil {
		return nil, err
	}
	if err := i.writeDataConf(i.DataDir()); err != nil {
		return nil, err
	}
	if err := i.writeStandbyConf(i.DataDir(), primary); err != nil {
		return nil, err
	}
	return i.startLocked(ctx)
}

// checkpointIfPromoted runs CHECKPOINT on a just-promoted primary.
// Before Postgres 16, pg_rewind learns the source's timeline from its
// control file, which a promotion updates only at the next checkpoint
// (requested, but spread over minutes). Until then pg_rewind sees both
// servers on the old timeline, says "no rewind required", and the former
// primary keeps its divergent writes and cannot follow.
func (i *Instance) checkpointIfPromoted(ctx context.Context, primary Endpoint) error {
	c, err := i.remoteConn(ctx, primary)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	var stale bool
	// CASE, not AND: pg_walfile_name fails during recovery (a standby as
	// source), and only CASE fixes the evaluation order.
	err = c.QueryRow(ctx, `SELECT CASE WHEN pg_is_in_recovery() THEN false ELSE
		(SELECT timeline_id FROM pg_control_checkpoint()) <>
		('x' || substr(pg_walfile_name(pg_current_wal_lsn()), 1, 8))::bit(32)::int END`).Scan(&stale)
	if err != nil {
		return fmt.Errorf("pgmanager: reading the timeline of %s: %w", primary, err)
	}
	if !stale {
		return nil
	}
	i.log.Info("checkpointing the new primary so pg_rewind sees its timeline", "primary", primary)
	if _, err := c.Exec(ctx, "CHECKPOINT"); err != nil {
		return fmt.Errorf("pgmanager: CHECKPOINT on %s: %w", primary, err)
	}
	return nil
}

// dropStaleSlots drops the inactive physical slots of a rewound instance.
func (i *Instance) dropStaleSlots(ctx context.Context) error {
	c, err := i.localConn(ctx)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	rows, err := c.Query(ctx, "SELECT slot_name FROM pg_replication_slots WHERE slot_type = 'physical' AND NOT active")
	if err != nil {
		return fmt.Errorf("pgmanager: listing slots: %w", err)
	}
	var slots []string
	for rows.Next() {
		var s string
		if err := rows.Scan(&s); err != nil {
			return err
		}
		slots = append(slots, s)
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgmanager: listing slots: %w", err)
	}
	for _, s := range slots {
		if _, err := c.Exec(ctx, "SELECT pg_drop_replication_slot($1)", s); err != nil {
			return fmt.Errorf("pgmanager: dropping stale slot %s: %w", s, err)
		}
		i.log.Info("dropped a replication slot left from the primary role", "slot", s)
	}
	return nil
}
