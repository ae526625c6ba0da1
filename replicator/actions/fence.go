package actions

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/workflows"
)

// fenceLockTimeout bounds how long a fence waits for the transactions
// writing to a table to end. A transaction held open longer makes the
// attempt fail (SQLSTATE 55P03, retried) and changes nothing: the held
// transaction commits on the source and its rows are streamed.
const fenceLockTimeout = 2 * time.Second

// lockNotAvailable is lock_timeout's SQLSTATE.
const lockNotAvailable = "55P03"

// FenceSources stops writes to the plan's tables on every source, one
// transaction per source: it takes each table's EXCLUSIVE lock (reads go
// on; it waits for the transactions that wrote to the table, within
// fenceLockTimeout), creates on each table a trigger that refuses every
// INSERT, UPDATE, DELETE and TRUNCATE with SQLSTATE 25006 and a message
// beginning with pgerr.CutoverFencePrefix (a router holds and re-plans a
// statement refused so, pgerr says why), and writes a transactional
// logical message, the marker, whose LSN it returns. Every transaction
// that wrote to the tables committed before the lock was granted, so
// before the marker: a stream that has applied everything committed
// before the marker has every acknowledged write, and nothing can be
// written after it. The running StreamChanges activities stop by
// themselves once they have applied the marker's transaction. A
// statement queued behind the lock plans again once it gets the lock
// (Postgres reads the invalidated table definition) and meets the
// trigger.
//
// The trigger lets through sessions bound to a replication origin: the
// reverse streams, which apply the targets' writes to the sources.
func (a *Actions) FenceSources(ctx context.Context, in workflows.CutoverInput) (workflows.FenceResult, error) {
	a = a.forPlan(in.Plan)
	res := workflows.FenceResult{Markers: map[string]string{}}
	defer beating(ctx, noDetails)()
	for _, src := range in.Plan.Sources {
		conn, _, err := a.connect(ctx, src, in.Plan.Database)
		if err != nil {
			return res, err
		}
		marker, err := fence(ctx, conn, in.Plan, in.FenceGeneration)
		closeAll(conn)
		if err != nil {
			return res, fenceError(fmt.Errorf("fencing source %s: %w", src, err))
		}
		if res.Fenced.IsZero() {
			res.Fenced = time.Now()
		}
		res.Markers[src] = marker.String()
	}
	return res, nil
}

// fenceMarker is the logical decoding message a fence of a generation
// writes, at which the plan's streams of that generation stop.
func fenceMarker(plan workflows.ReshardPlan, generation int) replicator.LogicalMessage {
	return replicator.LogicalMessage{Prefix: pgerr.CutoverFencePrefix, Content: plan.Key + "/" + strconv.Itoa(generation)}
}

// fenceError keeps a lock timeout retryable, which activityError would
// make final (class 55).
func fenceError(err error) error {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == lockNotAvailable {
		return temporal.NewApplicationError(err.Error(), lockNotAvailable)
	}
	return activityError(err)
}

func fence(ctx context.Context, conn *pgx.Conn, plan workflows.ReshardPlan, generation int) (pglogrepl.LSN, error) {
	tx, err := conn.Begin(ctx)
	if err != nil {
		return 0, err
	}
	defer tx.Rollback(context.Background())
	tables := make([]string, len(plan.Tables))
	for i, t := range plan.Tables {
		tables[i] = pgx.Identifier{t.Schema, t.Name}.Sanitize()
	}
	fn := pgx.Identifier{"_tessera", plan.FenceTrigger()}.Sanitize()
	message := pgwire.QuoteLiteral(pgerr.CutoverFencePrefix + "table ")
	stmts := []string{
		fmt.Sprintf("SET LOCAL lock_timeout = %d", fenceLockTimeout.Milliseconds()),
		// The marker's commit must be durable before the stream is asked
		// to reach it.
		"SET LOCAL synchronous_commit = on",
		"LOCK TABLE " + strings.Join(tables, ", ") + " IN EXCLUSIVE MODE",
		"CREATE SCHEMA IF NOT EXISTS _tessera",
		// SECURITY DEFINER: asking whether the session has a replication
		// origin is the replicator's privilege, not the writer's.
		`CREATE OR REPLACE FUNCTION ` + fn + `() RETURNS trigger LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog AS $f$
		BEGIN
			IF pg_replication_origin_session_is_setup() THEN
				RETURN NULL;
			END IF;
			RAISE EXCEPTION USING ERRCODE = '` + pgerr.ReadOnlySQLTransaction + `',
				MESSAGE = ` + message + ` || TG_TABLE_SCHEMA || '.' || TG_TABLE_NAME || ' has moved to other shards';
		END $f$`,
	}
	for _, t := range tables {
		trigger := pgx.Identifier{plan.FenceTrigger()}.Sanitize()
		stmts = append(stmts, "DROP TRIGGER IF EXISTS "+trigger+" ON "+t,
			"CREATE TRIGGER "+trigger+" BEFORE INSERT OR UPDATE OR DELETE OR TRUNCATE ON "+t+
				" FOR EACH STATEMENT EXECUTE FUNCTION "+fn+"()")
	}
	for _, s := range stmts {
		if _, err := tx.Exec(ctx, s); err != nil {
			return 0, err
		}
	}
	var marker pglogrepl.LSN
	m := fenceMarker(plan, generation)
	if err := tx.QueryRow(ctx, "SELECT pg_logical_emit_message(true, $1, $2)::text", m.Prefix, m.Content).Scan(&marker); err != nil {
		return 0, err
	}
	return marker, tx.Commit(ctx)
}

// UnfenceSources drops the fence triggers and their function from every
// source, wherever they are: a cutover that stops before its topology
// switch gives the sources their writes back.
func (a *Actions) UnfenceSources(ctx context.Context, in workflows.CutoverInput) error {
	defer beating(ctx, noDetails)()
	a = a.forPlan(in.Plan)
	for _, src := range in.Plan.Sources {
		conn, _, err := a.connect(ctx, src, in.Plan.Database)
		if err != nil {
			return err
		}
		err = unfence(ctx, conn, in.Plan)
		closeAll(conn)
		if err != nil {
			return activityError(fmt.Errorf("unfencing source %s: %w", src, err))
		}
	}
	return nil
}

// execer is a connection or a transaction.
type execer interface {
	Exec(ctx context.Context, sql string, args ...any) (pgconn.CommandTag, error)
}

// unfence drops the fence in one statement: CASCADE takes the triggers
// with the function.
func unfence(ctx context.Context, conn execer, plan workflows.ReshardPlan) error {
	_, err := conn.Exec(ctx, "DROP FUNCTION IF EXISTS "+pgx.Identifier{"_tessera", plan.FenceTrigger()}.Sanitize()+"() CASCADE")
	return err
}
