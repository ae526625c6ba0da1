package onlineddl

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/ddl"
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/workflows"
)

// markerDDL creates the table that records which migrations a shard's
// database has applied.
const markerDDL = `CREATE SCHEMA IF NOT EXISTS _tessera;
CREATE TABLE IF NOT EXISTS _tessera.ddl_migrations (
	id text PRIMARY KEY,
	statement text NOT NULL,
	applied_at timestamptz NOT NULL DEFAULT now())`

// indexHeartbeat is how often a concurrent index build heartbeats.
const indexHeartbeat = 5 * time.Second

// ApplyDDL runs a migration's statement on one shard's primary, once: it
// does nothing when an earlier attempt made the change (see the package
// doc). Each lock the statement waits for is bounded by the input's
// lock_timeout; a lock not granted in time fails the attempt with 55P03,
// which the workflow retries.
func (a *Activities) ApplyDDL(ctx context.Context, in workflows.ApplyDDLInput) (workflows.ApplyDDLResult, error) {
	if in.MigrationID == "" || in.Shard == "" || in.LockTimeoutMillis <= 0 {
		return workflows.ApplyDDLResult{}, refuse(pgerr.InvalidParameterValue, "migration_id, shard and lock_timeout_ms are required")
	}
	conn, err := a.connect(ctx, in.Shard, in.Database)
	if err != nil {
		return workflows.ApplyDDLResult{}, activityError(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var res workflows.ApplyDDLResult
	switch ddl.Execution(in.Plan.Execution) {
	case ddl.InTransaction:
		res, err = applyInTransaction(ctx, conn, in)
	case ddl.CreateIndexConcurrently:
		res, err = createIndexConcurrently(ctx, conn, in)
	case ddl.DropIndexConcurrently:
		res, err = dropIndexConcurrently(ctx, conn, in)
	default:
		err = refuse(pgerr.FeatureNotSupported, "execution %q is not a direct path's", in.Plan.Execution)
	}
	if err != nil {
		return res, activityError(fmt.Errorf("shard %s: %w", in.Shard, err))
	}
	a.announce(ctx, in.Database, in.MigrationID)
	return res, nil
}

// applyInTransaction runs the statement and records the migration in one
// transaction: the record exists exactly when the change does.
func applyInTransaction(ctx context.Context, conn *pgx.Conn, in workflows.ApplyDDLInput) (workflows.ApplyDDLResult, error) {
	var res workflows.ApplyDDLResult
	if _, err := conn.Exec(ctx, markerDDL); err != nil {
		// Two sessions creating it at once collide (23505 on pg_type):
		// the next attempt finds it made.
		return res, temporal.NewApplicationError("creating _tessera.ddl_migrations: "+err.Error(), pgerr.Code(err))
	}
	err := pgx.BeginFunc(ctx, conn, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, fmt.Sprintf("SET LOCAL lock_timeout = %d", in.LockTimeoutMillis)); err != nil {
			return err
		}
		if err := tx.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM _tessera.ddl_migrations WHERE id = $1)`, in.MigrationID).Scan(&res.AlreadyApplied); err != nil {
			return err
		}
		if res.AlreadyApplied {
			return nil
		}
		start := time.Now()
		if _, err := tx.Exec(ctx, in.SQL); err != nil {
			return err
		}
		res.Millis = float64(time.Since(start).Microseconds()) / 1000
		_, err := tx.Exec(ctx, `INSERT INTO _tessera.ddl_migrations (id, statement) VALUES ($1, $2)`, in.MigrationID, in.SQL)
		return err
	})
	return res, err
}

// createIndexConcurrently builds the index outside a transaction. A valid
// index of that name means an earlier attempt built it; an INVALID one is
// what a failed or interrupted build leaves, dropped before building again
// (and after a failed build, so that it does not slow writes meanwhile).
func createIndexConcurrently(ctx context.Context, conn *pgx.Conn, in workflows.ApplyDDLInput) (workflows.ApplyDDLResult, error) {
	var res workflows.ApplyDDLResult
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET lock_timeout = %d", in.LockTimeoutMillis)); err != nil {
		return res, err
	}
	name := pgx.Identifier{in.Plan.Schema, in.Plan.Index}.Sanitize()
	valid, exists, err := indexState(ctx, conn, name)
	if err != nil {
		return res, err
	}
	if exists && valid {
		res.AlreadyApplied = true
		return res, nil
	}
	if exists {
		if _, err := conn.Exec(ctx, "DROP INDEX CONCURRENTLY IF EXISTS "+name); err != nil {
			return res, fmt.Errorf("dropping the INVALID index %s an earlier build left: %w", name, err)
		}
		res.DroppedInvalidIndex = true
	}
	stop := heartbeat(ctx)
	start := time.Now()
	_, err = conn.Exec(ctx, in.SQL)
	stop()
	if err != nil {
		if conn.IsClosed() {
			return res, err
		}
		cleanup := context.WithoutCancel(ctx)
		if _, exists, serr := indexState(cleanup, conn, name); serr == nil && exists {
			if _, derr := conn.Exec(cleanup, "DROP INDEX CONCURRENTLY IF EXISTS "+name); derr != nil {
				return res, fmt.Errorf("%w (and dropping the INVALID index it left failed: %v; the next attempt drops it)", err, derr)
			}
		}
		return res, err
	}
	res.Millis = float64(time.Since(start).Microseconds()) / 1000
	return res, nil
}

// dropIndexConcurrently drops the index outside a transaction; an index
// already gone is an earlier attempt's work.
func dropIndexConcurrently(ctx context.Context, conn *pgx.Conn, in workflows.ApplyDDLInput) (workflows.ApplyDDLResult, error) {
	var res workflows.ApplyDDLResult
	if _, err := conn.Exec(ctx, fmt.Sprintf("SET lock_timeout = %d", in.LockTimeoutMillis)); err != nil {
		return res, err
	}
	_, exists, err := indexState(ctx, conn, pgx.Identifier{in.Plan.Schema, in.Plan.Index}.Sanitize())
	if err != nil {
		return res, err
	}
	if !exists {
		res.AlreadyApplied = true
		return res, nil
	}
	start := time.Now()
	if _, err := conn.Exec(ctx, in.SQL); err != nil {
		return res, err
	}
	res.Millis = float64(time.Since(start).Microseconds()) / 1000
	return res, nil
}

// indexState says whether the index exists and whether it is valid.
func indexState(ctx context.Context, conn *pgx.Conn, name string) (valid, exists bool, err error) {
	err = conn.QueryRow(ctx, `SELECT coalesce((SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass($1)), false),
		to_regclass($1) IS NOT NULL`, name).Scan(&valid, &exists)
	return valid, exists, err
}

// heartbeat heartbeats the activity until stopped, when ctx is an
// activity's.
func heartbeat(ctx context.Context) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(indexHeartbeat)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done) }
}
