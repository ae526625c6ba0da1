package pgmanager

import (
	"context"
	"fmt"
)

// InitReplica creates this instance as a streaming replica of primary.
// It first makes sure this instance's physical replication slot exists on
// the primary, reserving WAL from that moment, and then takes a base
// backup with pg_basebackup -X stream through that slot: no WAL the
// replica needs can be recycled between the backup and the replica's
// first connection, and running InitReplica again after a failure reuses
// the slot. The copy gets pgmanager's configuration and standby settings
// (primary_conninfo with the password in Dir/pgpass, primary_slot_name)
// and loses the primary's fence and synchronous_standby_names. It does
// nothing if the instance is already initialized.
func (i *Instance) InitReplica(ctx context.Context, primary Endpoint) error {
	if err := primary.validate(); err != nil {
		return err
	}
	i.opMu.Lock()
	defer i.opMu.Unlock()
	if err := i.checkOpen(); err != nil {
		return err
	}
	if i.Initialized() {
		i.log.Debug("already initialized; InitReplica does nothing")
		return nil
	}
	if err := i.prepareDir(); err != nil {
		return err
	}
	if err := i.ensureSlot(ctx, primary); err != nil {
		return err
	}
	partial, err := i.freshPartialDir()
	if err != nil {
		return err
	}
	err = i.runTool(ctx, "pg_basebackup",
		"--pgdata="+partial,
		"--wal-method=stream",
		"--slot="+slotName(i.cfg.InstanceID),
		"--checkpoint=fast",
		"--no-password",
		// Not the replica's own application_name: the backup's WAL stream
		// must not look like the standby to synchronous_standby_names.
		"--dbname="+i.primaryConnInfo(primary, i.cfg.InstanceID+"_basebackup"),
	)
	if err != nil {
		return err
	}
	if err := i.scrubAutoConf(partial); err != nil {
		return err
	}
	if err := i.writeDataConf(partial); err != nil {
		return err
	}
	if err := i.writeStandbyConf(partial, primary); err != nil {
		return err
	}
	if err := i.commitPartialDir(partial); err != nil {
		return err
	}
	i.log.Info("initialized as a replica", "primary", primary)
	return nil
}

// FollowPrimary repoints a replica at another primary, typically a sibling
// just promoted: it ensures this instance's slot on the new primary,
// rewrites primary_conninfo and primary_slot_name, and, if postgres is
// running, reloads (since Postgres 13 the walreceiver restarts with the
// new settings, no restart needed) and waits until the new settings are
// in effect. The replica follows the new primary's timeline switch
// (recovery_target_timeline is 'latest'), which works only if it has not
// replayed past the point where the new primary's history forked; a
// replica that has needs Rewind instead. On a primary it returns an error.
func (i *Instance) FollowPrimary(ctx context.Context, primary Endpoint) error {
	if err := primary.validate(); err != nil {
		return err
	}
	i.opMu.Lock()
	defer i.opMu.Unlock()
	if err := i.checkOpen(); err != nil {
		return err
	}
	if !i.Initialized() {
		return fmt.Errorf("pgmanager: FollowPrimary: %s is not initialized", i.DataDir())
	}
	if !i.isStandby() {
		return fmt.Errorf("pgmanager: FollowPrimary: %s is a primary (no standby.signal); use Rewind to make it a replica", i.cfg.InstanceID)
	}
	if err := i.ensureSlot(ctx, primary); err != nil {
		return err
	}
	if err := i.writeStandbyConf(i.DataDir(), primary); err != nil {
		return err
	}
	i.log.Info("following a new primary", "primary", primary)
	if !i.Running() {
		return nil
	}
	c, err := i.localConn(ctx)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	return reloadAndWait(ctx, c, "primary_conninfo", i.primaryConnInfo(primary, i.cfg.InstanceID))
}

// ensureSlot creates this instance's physical replication slot on primary
// unless it exists. The slot reserves WAL at once, so that nothing this
// replica will ask for is removed before it connects. An inactive slot
// pins WAL on the primary forever: the control plane drops the slot of a
// replica it retires.
func (i *Instance) ensureSlot(ctx context.Context, primary Endpoint) error {
	c, err := i.remoteConn(ctx, primary)
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	slot := slotName(i.cfg.InstanceID)
	var n int
	if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE slot_name = $1", slot).Scan(&n); err != nil {
		return fmt.Errorf("pgmanager: looking up slot %s on %s: %w", slot, primary, err)
	}
	if n > 0 {
		return nil
	}
	_, err = c.Exec(ctx, "SELECT pg_create_physical_replication_slot($1, true)", slot)
	if err != nil && sqlState(err) != "42710" { // duplicate_object: created concurrently
		return fmt.Errorf("pgmanager: creating slot %s on %s: %w", slot, primary, err)
	}
	i.log.Info("created replication slot on the primary", "slot", slot, "primary", primary)
	return nil
}
