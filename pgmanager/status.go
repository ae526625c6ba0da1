package pgmanager

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
)

// Role is what an instance is in replication.
type Role string

// The roles. A stopped instance's role is read from its data directory
// (standby.signal); an uninitialized one has none.
const (
	RolePrimary Role = "primary"
	RoleReplica Role = "replica"
)

// Status is a snapshot of an instance, for the sidecar's health reports
// and the control plane's failover decisions.
type Status struct {
	// Running is whether our postmaster is alive and answered; when
	// false, only Role is filled in.
	Running bool
	Role    Role
	// Fenced is whether default_transaction_read_only is on (see Fence).
	Fenced bool
	// Timeline is the WAL timeline: the primary's current one, or the one
	// a replica last received (its last restartpoint's before it has
	// received anything). Each promotion starts a new timeline.
	Timeline int
	// CurrentLSN is a primary's WAL write position; 0 on a replica.
	CurrentLSN LSN
	// ReceiveLSN and ReplayLSN are how far a replica has received (and
	// flushed) and replayed WAL; 0 on a primary. The replica with the
	// highest ReceiveLSN has lost the least when its primary is gone.
	ReceiveLSN, ReplayLSN LSN
	// ReplayLag is, on a replica that has not replayed everything it
	// received, now() - pg_last_xact_replay_timestamp(): how old the data
	// it serves is. It is 0 when everything received is replayed (an idle
	// primary sends no transactions, and the timestamp would grow without
	// the replica being behind) and when unknown.
	ReplayLag time.Duration
	// SynchronousStandbyNames is the current synchronous_standby_names.
	SynchronousStandbyNames string
	// Upstream is the primary a replica's walreceiver is connected to and
	// ReceiverStatus its state ("streaming", "catchup", ...); zero and ""
	// when there is no walreceiver (a primary, or a replica that cannot
	// reach its primary).
	Upstream       Endpoint
	ReceiverStatus string
	// Replicas are the replicas streaming from this instance now
	// (pg_stat_replication), by application_name.
	Replicas []ReplicaStatus
}

// ReplicaStatus is a row of pg_stat_replication as the primary sees it.
type ReplicaStatus struct {
	// ApplicationName is the replica's InstanceID.
	ApplicationName string
	// State is "startup", "catchup", "streaming", "backup" or "stopping".
	State string
	// SentLSN, WriteLSN, FlushLSN and ReplayLSN are how far the replica
	// has been sent, written, flushed and replayed WAL.
	SentLSN, WriteLSN, FlushLSN, ReplayLSN LSN
	// SyncState is "async", "potential", "sync" or "quorum".
	SyncState string
	// ReplayLag is the primary's measure of how long it took recent WAL to
	// be replayed there (pg_stat_replication.replay_lag); 0 when idle.
	ReplayLag time.Duration
}

// Status reports the instance's state. A stopped instance is not an
// error: Running is false and Role comes from the data directory. A
// postmaster that runs but does not answer (still starting or
// recovering, or hung) is: Status returns the error, with Role from the
// data directory.
func (i *Instance) Status(ctx context.Context) (Status, error) {
	var st Status
	if i.Initialized() {
		st.Role = RolePrimary
		if i.isStandby() {
			st.Role = RoleReplica
		}
	}
	if !i.Running() {
		return st, nil
	}
	c, err := i.localConn(ctx)
	if err != nil {
		return st, err
	}
	defer c.Close(ctx)

	var inRecovery bool
	err = c.QueryRow(ctx, `SELECT pg_is_in_recovery(),
		current_setting('default_transaction_read_only') = 'on',
		current_setting('synchronous_standby_names')`).Scan(&inRecovery, &st.Fenced, &st.SynchronousStandbyNames)
	if err != nil {
		return st, fmt.Errorf("pgmanager: status: %w", err)
	}
	st.Running = true
	if inRecovery {
		st.Role = RoleReplica
		err = replicaStatus(ctx, c, &st)
	} else {
		st.Role = RolePrimary
		err = primaryStatus(ctx, c, &st)
	}
	if err != nil {
		return st, fmt.Errorf("pgmanager: status: %w", err)
	}
	st.Replicas, err = replicas(ctx, c)
	if err != nil {
		return st, fmt.Errorf("pgmanager: status: %w", err)
	}
	return st, nil
}

func primaryStatus(ctx context.Context, c *pgx.Conn, st *Status) error {
	var lsn, walfile string
	if err := c.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text, pg_walfile_name(pg_current_wal_lsn())").Scan(&lsn, &walfile); err != nil {
		return err
	}
	var err error
	if st.CurrentLSN, err = ParseLSN(lsn); err != nil {
		return err
	}
	// A WAL file name starts with the timeline in 8 hex digits.
	if len(walfile) < 8 {
		return fmt.Errorf("unexpected WAL file name %q", walfile)
	}
	tli, err := strconv.ParseUint(walfile[:8], 16, 32)
	if err != nil {
		return fmt.Errorf("WAL file name %q: %w", walfile, err)
	}
	st.Timeline = int(tli)
	return nil
}

func replicaStatus(ctx context.Context, c *pgx.Conn, st *Status) error {
	var recv, replay string
	var lagSeconds float64
	err := c.QueryRow(ctx, `SELECT COALESCE(pg_last_wal_receive_lsn()::text, ''),
		COALESCE(pg_last_wal_replay_lsn()::text, ''),
		CASE WHEN pg_last_wal_receive_lsn() IS NULL OR pg_last_wal_receive_lsn() <= pg_last_wal_replay_lsn() THEN 0
		     ELSE COALESCE(EXTRACT(epoch FROM now() - pg_last_xact_replay_timestamp()), 0) END::float8,
		COALESCE((SELECT received_tli FROM pg_stat_wal_receiver), (SELECT timeline_id FROM pg_control_checkpoint()))`).
		Scan(&recv, &replay, &lagSeconds, &st.Timeline)
	if err != nil {
		return err
	}
	if st.ReceiveLSN, err = parseLSNOrZero(recv); err != nil {
		return err
	}
	if st.ReplayLSN, err = parseLSNOrZero(replay); err != nil {
		return err
	}
	st.ReplayLag = max(time.Duration(lagSeconds*float64(time.Second)), 0)
	rows, err := c.Query(ctx, "SELECT status, COALESCE(sender_host, ''), COALESCE(sender_port, 0) FROM pg_stat_wal_receiver")
	if err != nil {
		return err
	}
	defer rows.Close()
	for rows.Next() {
		if err := rows.Scan(&st.ReceiverStatus, &st.Upstream.Host, &st.Upstream.Port); err != nil {
			return err
		}
	}
	return rows.Err()
}

func replicas(ctx context.Context, c *pgx.Conn) ([]ReplicaStatus, error) {
	rows, err := c.Query(ctx, `SELECT application_name, COALESCE(state, ''),
		COALESCE(sent_lsn::text, ''), COALESCE(write_lsn::text, ''), COALESCE(flush_lsn::text, ''), COALESCE(replay_lsn::text, ''),
		COALESCE(sync_state, ''), COALESCE(EXTRACT(epoch FROM replay_lag), 0)::float8
		FROM pg_stat_replication ORDER BY application_name, pid`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ReplicaStatus
	for rows.Next() {
		var r ReplicaStatus
		var lsns [4]string
		var lag float64
		if err := rows.Scan(&r.ApplicationName, &r.State, &lsns[0], &lsns[1], &lsns[2], &lsns[3], &r.SyncState, &lag); err != nil {
			return nil, err
		}
		for k, p := range []*LSN{&r.SentLSN, &r.WriteLSN, &r.FlushLSN, &r.ReplayLSN} {
			if *p, err = parseLSNOrZero(lsns[k]); err != nil {
				return nil, err
			}
		}
		r.ReplayLag = time.Duration(lag * float64(time.Second))
		out = append(out, r)
	}
	return out, rows.Err()
}
