// Package pgmanager owns one real Postgres instance: initdb, configuration,
// start and stop, supervision, replication from a primary, promotion,
// pg_rewind, fencing and synchronous replication settings. Each shard
// replica in Tessera is one Instance, driven by its sidecar.
//
// # The instance directory
//
// Config.Dir belongs to pgmanager:
//
//	Dir/data          PGDATA
//	Dir/run           the unix socket directory, mode 0700
//	Dir/pgpass        the superuser password for replication, mode 0600
//	Dir/postgres.log  postgres's stderr and the tools' output, appended
//
// A new data directory is built as Dir/data.partial and renamed into
// place when complete, so an interrupted initdb or base backup never
// looks initialized.
//
// # Configuration
//
// pgmanager writes Dir/data/tessera.conf (its settings, rewritten on
// every start from the Config) and includes it once from
// postgresql.conf; a replica's primary_conninfo and primary_slot_name
// live in tessera-standby.conf, which tessera.conf includes (on a
// primary it holds only a comment).
// pg_hba.conf is rewritten too: unix socket connections are trusted (the
// socket directory is the access control), TCP needs scram-sha-256. The
// password is never written into a configuration file or a log: initdb
// reads it from a file deleted afterwards, replication from Dir/pgpass.
// Fence and SetSynchronousStandbys use ALTER SYSTEM, so they survive
// restarts.
//
// # Processes
//
// Postgres refuses to run as root. When pgmanager runs as root it runs
// every Postgres binary as an unprivileged OS user (Config.OSUser,
// default "postgres") and gives the instance directory to that user;
// the directory's ancestors must be traversable by it.
//
// The postmaster is a child of pgmanager (`postgres -D`, not pg_ctl), in
// its own process group, with a parent-death signal (SIGINT, fast
// shutdown), so it never outlives the process that manages it. A
// supervisor goroutine waits on it: an exit that Stop did not ask for is
// a crash, logged and, with Config.RestartOnCrash, followed by a restart
// with backoff. Start clears what a killed predecessor left: a stale
// postmaster.pid, a postmaster of an earlier run still shutting down,
// orphaned backends. After Close nothing of the Instance runs.
//
// # Replication
//
// Replicas stream from their primary through a physical slot named after
// their InstanceID (with '-' turned into '_'), created on the primary
// before the base backup, rewind or repointing that needs it; their
// application_name is the InstanceID, which is what
// synchronous_standby_names refers to. All instances of a cluster share
// the superuser password. Failover uses Promote on the chosen replica,
// FollowPrimary on the other replicas and Rewind on the former primary.
//
// Postgres 13 or newer is required.
package pgmanager
