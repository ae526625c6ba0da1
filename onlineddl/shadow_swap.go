package onlineddl

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// markerWait bounds how long a swap, holding the table's lock, waits for
// the stream to apply its marker; catching up first leaves it a few
// transactions to apply.
const markerWait = 10 * time.Second

// SwapShadow puts the shadow table in the table's place on the shard:
//  1. it publishes the shadow and creates the reverse stream's slot (which
//     must exist before the swap: creating a slot waits for every running
//     transaction, the swap's own included);
//  2. it runs the forward stream until it has caught up;
//  3. routers hold the table's statements (a table buffer, when
//     BufferMillis is set), so that few of them queue behind the lock;
//  4. in one transaction: the table's ACCESS EXCLUSIVE lock, within
//     lock_timeout (55P03 otherwise, retried: nothing changed); a marker
//     written by another session, which commits after every transaction
//     that wrote to the table; the forward stream run until it has applied
//     the marker, and so every acknowledged write; the exchange (see
//     exchange) and the record's new state; commit;
//  5. the buffer ends; the reverse stream's origin is set to the swap, so
//     that it carries the writes the new table takes from then on; the
//     forward slot and publication go; the foreign keys added NOT VALID
//     are validated.
//
// A retry after the commit finds the record swapped and does only step 5.
func (a *Activities) SwapShadow(ctx context.Context, in workflows.ShadowInput) (workflows.ShadowResult, error) {
	conn, n, rec, err := a.shadowStep(ctx, in)
	if err != nil {
		return workflows.ShadowResult{}, activityError(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	url, err := a.Conn.ConnString(ctx, in.Shard, in.Database)
	if err != nil {
		return workflows.ShadowResult{}, activityError(err)
	}
	stop := beatEvery(ctx, 5*time.Second, func() any { return nil })
	defer stop()
	var res workflows.ShadowResult
	switch {
	case rec == nil || rec.state == workflows.ShadowPrepared:
		return res, refuse(pgerr.ObjectNotInPrerequisiteState, "shard %s: the shadow table is not copied yet", in.Shard)
	case rec.state == workflows.ShadowCopied:
		if err := ensurePublication(ctx, conn, n.publication(false), n.qual(n.shadow)); err != nil {
			return res, activityError(err)
		}
		if err := ensureSlot(ctx, conn, n.slot(false)); err != nil {
			return res, activityError(err)
		}
		res, err = a.swap(ctx, conn, in, n, shadowStream{url: url, n: n, forward: true}, n.shadow, n.old, workflows.ShadowSwapped)
		if err != nil {
			return res, swapError(in.Shard, err)
		}
		rec, err = readRecord(ctx, conn, in.MigrationID)
		if err != nil {
			return res, activityError(err)
		}
	case rec.state == workflows.ShadowSwapped:
		res.AlreadyDone = true
	case rec.state == workflows.ShadowCompleted:
		return workflows.ShadowResult{State: rec.state, AlreadyDone: true}, nil
	default:
		return res, refuse(pgerr.ObjectNotInPrerequisiteState, "shard %s: the migration is %s", in.Shard, rec.state)
	}
	res.State = workflows.ShadowSwapped
	if err := afterSwap(ctx, conn, n, in.MigrationID, rec); err != nil {
		return res, activityError(fmt.Errorf("shard %s: after the swap: %w", in.Shard, err))
	}
	return res, nil
}

// swapError keeps a lock timeout retryable (activityError would too) and
// says nothing changed.
func swapError(shard string, err error) error {
	return activityError(fmt.Errorf("shard %s: swap (nothing changed): %w", shard, err))
}

// ensureSlot creates a logical replication slot (no snapshot needed) once.
func ensureSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	exists, err := replicator.SlotExists(ctx, conn, slot)
	if err != nil || exists {
		return err
	}
	_, err = conn.Exec(ctx, "SELECT pg_create_logical_replication_slot($1, 'pgoutput')", slot)
	return err
}

// swap runs steps 2 to 4 of SwapShadow for either direction: stream
// carries the table's writes into repl, which takes the table's name;
// the table is renamed aside; the record's state becomes state.
func (a *Activities) swap(ctx context.Context, conn *pgx.Conn, in workflows.ShadowInput, n shadowNames, stream shadowStream,
	repl, aside, state string) (workflows.ShadowResult, error) {
	var res workflows.ShadowResult
	marker := replicator.LogicalMessage{Prefix: swapMarkerPrefix, Content: n.tag + "/" + strconv.FormatInt(time.Now().UnixNano(), 10)}
	run, err := stream.start(ctx, marker)
	if err != nil {
		return res, err
	}
	defer run.stop()
	if err := run.catchUp(ctx, conn); err != nil {
		return res, fmt.Errorf("%s stream catching up: %w", direction(stream.forward), err)
	}
	// The marker's session is opened before the table buffer and the
	// lock: connecting and authenticating is not work to do while the
	// routers hold the writers.
	mconn, err := pgx.Connect(ctx, stream.url)
	if err != nil {
		return res, err
	}
	defer mconn.Close(context.WithoutCancel(ctx))
	if a.Store != nil && in.BufferMillis > 0 {
		id := "onlineddl_" + n.tag
		b := store.TableBuffer{ID: id, Database: in.Database, Tables: []string{n.schema + "." + n.table},
			Reason: "OnlineDDL swap of " + n.schema + "." + n.table + " on " + in.Shard,
			For:    time.Duration(in.BufferMillis) * time.Millisecond, Set: time.Now()}
		if err := a.Store.SetTableBuffer(ctx, b); err != nil {
			return res, err
		}
		// The buffer ends by itself after For; ending it at once is
		// what keeps the pause short.
		defer a.Store.ClearTableBuffer(context.WithoutCancel(ctx), id)
	}
	// Routers forget the table's old catalog before the buffer lets its
	// statements go (defers run last first).
	committed := false
	defer func() {
		if committed {
			a.announce(ctx, in.Database, in.MigrationID)
		}
	}()
	tx, err := conn.Begin(ctx)
	if err != nil {
		return res, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx))
	for _, s := range []string{
		fmt.Sprintf("SET LOCAL lock_timeout = %d", in.LockTimeoutMillis),
		"SET LOCAL synchronous_commit = on",
		"LOCK TABLE " + n.qual(n.table) + " IN ACCESS EXCLUSIVE MODE",
	} {
		if _, err := tx.Exec(ctx, s); err != nil {
			return res, err
		}
	}
	locked := time.Now()
	// The marker commits in a session of its own: the stream applies a
	// transaction only once it commits, and this one holds the lock
	// until the exchange is done. Every transaction that wrote to the
	// table committed before the lock was granted, so before the marker.
	_, err = mconn.Exec(ctx, "SET synchronous_commit = on; SELECT pg_logical_emit_message(true, '"+marker.Prefix+"', '"+marker.Content+"')")
	if err != nil {
		return res, fmt.Errorf("writing the swap's marker: %w", err)
	}
	select {
	case err = <-run.done:
		run.done <- err
	case <-time.After(markerWait):
		err = errors.New("timed out")
	case <-ctx.Done():
		err = ctx.Err()
	}
	if err != nil {
		return res, temporal.NewApplicationError(fmt.Sprintf("the %s stream did not apply the swap's marker: %v", direction(stream.forward), err), pgerr.QueryCanceled)
	}
	res.CatchUpMillis = millis(time.Since(locked))
	if _, err := tx.Exec(ctx, "LOCK TABLE "+n.qual(repl)+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		return res, err
	}
	validate, moved, err := exchange(ctx, tx, n.schema, n.table, repl, aside)
	if err != nil {
		return res, err
	}
	if validate == nil {
		validate = []string{} // the column is NOT NULL; pgx sends a nil slice as NULL
	}
	if _, err := tx.Exec(ctx, `UPDATE _tessera.shadow_migrations SET state = $2, swap_lsn = pg_current_wal_lsn(), validate = $3, updated_at = now()
		WHERE id = $1`, in.MigrationID, state, validate); err != nil {
		return res, err
	}
	if err := tx.Commit(ctx); err != nil {
		return res, err
	}
	committed = true
	res.LockMillis, res.Moved, res.State = millis(time.Since(locked)), moved, state
	return res, nil
}

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// afterSwap is step 5 of SwapShadow, idempotent.
func afterSwap(ctx context.Context, conn *pgx.Conn, n shadowNames, id string, rec *shadowRecord) error {
	if rec.swapLSN == nil {
		return pgerr.New(pgerr.InternalError, "the swap recorded no position")
	}
	// Everything before the swap's position that wrote to the new table
	// is the forward stream's work, which the old table already has.
	if _, err := conn.Exec(ctx, `SELECT pg_replication_origin_create($1)
		WHERE NOT EXISTS (SELECT FROM pg_replication_origin WHERE roname = $1)`, n.origin(false)); err != nil {
		return err
	}
	var progress *string
	if err := conn.QueryRow(ctx, "SELECT pg_replication_origin_progress($1, false)::text", n.origin(false)).Scan(&progress); err != nil {
		return err
	}
	if progress == nil {
		if _, err := conn.Exec(ctx, "SELECT pg_replication_origin_advance($1, $2::pg_lsn)", n.origin(false), *rec.swapLSN); err != nil {
			return err
		}
	}
	if err := dropStream(ctx, conn, n, true); err != nil {
		return err
	}
	return validateFKs(ctx, conn, id, rec.validate)
}

// validateFKs validates the foreign keys a swap added NOT VALID (a scan
// under SHARE UPDATE EXCLUSIVE, which takes no writer's lock), then
// forgets them.
func validateFKs(ctx context.Context, conn *pgx.Conn, id string, list []string) error {
	for _, s := range list {
		if _, err := conn.Exec(ctx, s); err != nil {
			return fmt.Errorf("%s: %w", s, err)
		}
	}
	if len(list) == 0 {
		return nil
	}
	_, err := conn.Exec(ctx, "UPDATE _tessera.shadow_migrations SET validate = '{}' WHERE id = $1", id)
	return err
}

// dropStream drops a direction's slot, publication and origin, and the
// copy's progress rows, wherever they are. A slot still in use (the
// stream's walsender not gone yet) fails with 55006, retried.
func dropStream(ctx context.Context, conn *pgx.Conn, n shadowNames, forward bool) error {
	for _, s := range []string{n.slot(forward), n.slot(forward) + "_c"} {
		if err := dropSlot(ctx, conn, s); err != nil {
			return err
		}
	}
	for _, s := range []string{
		"DROP PUBLICATION IF EXISTS " + pgx.Identifier{n.publication(forward)}.Sanitize(),
		"SELECT pg_replication_origin_drop(roname) FROM pg_replication_origin WHERE roname = '" + n.origin(forward) + "'",
		"DELETE FROM _tessera.copy_progress WHERE workflow = '" + n.tag + "' AND source = '" + direction(forward) + "'",
	} {
		if _, err := conn.Exec(ctx, s); err != nil {
			var pgErr *pgconn.PgError
			if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
				continue // no copy ever wrote progress here
			}
			return err
		}
	}
	return nil
}

// slotBusyWait bounds how long dropSlot waits for a stream that has just
// stopped to let its slot go: its walsender exits a moment after the
// connection closes.
const slotBusyWait = 5 * time.Second

func dropSlot(ctx context.Context, conn *pgx.Conn, slot string) error {
	deadline := time.Now().Add(slotBusyWait)
	for {
		err := replicator.DropSlot(ctx, conn, slot)
		var pgErr *pgconn.PgError
		if err == nil || !errors.As(err, &pgErr) || pgErr.Code != "55006" || time.Now().After(deadline) {
			return err
		}
		select {
		case <-ctx.Done():
			return err
		case <-time.After(50 * time.Millisecond):
		}
	}
}
