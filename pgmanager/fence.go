package pgmanager

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Fence makes the instance read-only for its clients, the step before a
// switchover or after a lost primary comes back: ALTER SYSTEM SET
// default_transaction_read_only = on, reload (and wait until it is in
// effect), then terminate every client session except pgmanager's own,
// wait until they are gone, and, if it was not fenced before, flush the
// WAL (flushWAL). Sessions
// opened before the reload keep their old default and might be inside a
// write transaction, which is why they are ended rather than left to
// finish; walsenders are not
// client sessions, so replication continues and replicas catch up. When
// Fence returns, no session that could still write remains.
//
// This alone does not stop a client that wants to write: a session can
// still run SET default_transaction_read_only = off, or BEGIN READ WRITE.
// The sidecar is the fence that holds (sidecar/fence.go): it refuses
// every client batch before it calls Fence, which then ends the sessions
// already open. Fence is idempotent; the setting survives restarts until
// Unfence.
func (i *Instance) Fence(ctx context.Context) error {
	c, err := i.localConn(ctx)
	if err != nil {
		return fmt.Errorf("pgmanager: Fence: %w", err)
	}
	defer c.Close(ctx)
	// This session started with the server's setting: "on" means the
	// instance was fenced before this call.
	var was string
	if err := c.QueryRow(ctx, "SELECT current_setting('default_transaction_read_only')").Scan(&was); err != nil {
		return fmt.Errorf("pgmanager: Fence: %w", err)
	}
	on := "on"
	if err := alterSystem(ctx, c, "default_transaction_read_only", &on, "on"); err != nil {
		return err
	}
	// The call is in the target list, not the WHERE clause: the planner
	// may evaluate WHERE conditions in any order, and pg_terminate_backend
	// must only ever see the rows that passed the filter.
	rows, err := c.Query(ctx, `SELECT pid, pg_terminate_backend(pid) FROM pg_stat_activity
		WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()`)
	if err != nil {
		return fmt.Errorf("pgmanager: Fence: terminating sessions: %w", err)
	}
	var pids []int32
	for rows.Next() {
		var pid int32
		var signalled bool
		if err := rows.Scan(&pid, &signalled); err != nil {
			return err
		}
		if signalled {
			pids = append(pids, pid)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("pgmanager: Fence: terminating sessions: %w", err)
	}
	for _, pid := range pids {
		for {
			var n int
			if err := c.QueryRow(ctx, "SELECT count(*) FROM pg_stat_activity WHERE pid = $1", pid).Scan(&n); err != nil {
				return fmt.Errorf("pgmanager: Fence: %w", err)
			}
			if n == 0 {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("pgmanager: Fence: session %d has not ended: %w", pid, ctx.Err())
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
	// Only the call that fences writes WAL to flush it. Fencing again
	// (a retry, a deposed primary's sidecar fencing it once the new
	// primary is published) must write none: the other replicas, which
	// may still stream from this instance until they are repointed,
	// would receive it past the point where the new primary's history
	// forked, and could not follow it without a rewind.
	if was != "on" {
		if err := flushWAL(ctx, c); err != nil {
			return fmt.Errorf("pgmanager: Fence: flushing WAL: %w", err)
		}
	}
	i.log.Info("fenced", "terminated_sessions", len(pids))
	return nil
}

// flushWAL writes out every WAL record inserted so far. Not all WAL is
// flushed when it is inserted: a read that sets hint bits logs a full
// page image (data checksums are on) that waits for the WAL writer, up
// to wal_writer_delay (200 ms) or longer when it hibernates, and
// walsenders send only flushed WAL. A switchover waits for its
// candidate to replay up to the fenced primary's WAL position, so
// without this it waited about 0.4 s on an idle shard. A commit flushes
// WAL up to its own record, but only when the transaction wrote WAL
// before it, so pgmanager's own transaction writes a transactional
// logical decoding message (no data; decoders that do not ask for
// messages, as the replicator's, skip it). synchronous_commit = local
// keeps the commit from waiting for standbys, which may be gone. The
// fence holds for clients: READ WRITE is this transaction's own.
func flushWAL(ctx context.Context, c *pgx.Conn) error {
	// A replica writes no WAL of its own, and could not run this.
	if inRecovery, err := isInRecovery(ctx, c); err != nil || inRecovery {
		return err
	}
	tx, err := c.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadWrite})
	if err != nil {
		return err
	}
	defer tx.Rollback(ctx)
	if _, err := tx.Exec(ctx, "SET LOCAL synchronous_commit = local"); err != nil {
		return err
	}
	if _, err := tx.Exec(ctx, "SELECT pg_logical_emit_message(true, 'tessera.fence', '')"); err != nil {
		return err
	}
	return tx.Commit(ctx)
}

// Unfence reverses Fence: ALTER SYSTEM RESET default_transaction_read_only
// and reload; new sessions may write again (sessions are not terminated).
func (i *Instance) Unfence(ctx context.Context) error {
	c, err := i.localConn(ctx)
	if err != nil {
		return fmt.Errorf("pgmanager: Unfence: %w", err)
	}
	defer c.Close(ctx)
	if err := alterSystem(ctx, c, "default_transaction_read_only", nil, "off"); err != nil {
		return err
	}
	i.log.Info("unfenced")
	return nil
}
