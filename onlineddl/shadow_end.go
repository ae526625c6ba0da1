package onlineddl

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/workflows"
)

// RevertShadow gives the shard its old table back after a swap, with every
// write the new one took: the same swap, the other way (the reverse
// stream applies up to a marker written under the new table's lock, then
// the old table takes the name back, and what hangs off the table moves
// back to it). Then the new table and both streams are dropped. The
// reverse stream must be stopped first (the workflow cancels
// StreamShadow). A retry after the swap back only drops what is left.
func (a *Activities) RevertShadow(ctx context.Context, in workflows.ShadowInput) (workflows.ShadowResult, error) {
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
	case rec == nil || rec.state != workflows.ShadowSwapped && rec.state != workflows.ShadowReverted:
		state := "none"
		if rec != nil {
			state = rec.state
		}
		return res, refuse(pgerr.ObjectNotInPrerequisiteState, "shard %s: only a swapped table can be reverted (state %s)", in.Shard, state)
	case rec.state == workflows.ShadowSwapped:
		// The old table holds the shadow's old name again, the new one
		// is set aside under the shadow's.
		res, err = a.swap(ctx, conn, in, n, shadowStream{url: url, n: n}, n.old, n.shadow, workflows.ShadowReverted)
		if err != nil {
			return res, swapError(in.Shard, err)
		}
	default:
		res.AlreadyDone = true
	}
	res.State = workflows.ShadowReverted
	if rec, err = readRecord(ctx, conn, in.MigrationID); err != nil {
		return res, activityError(err)
	}
	if err := validateFKs(ctx, conn, in.MigrationID, rec.validate); err != nil {
		return res, activityError(fmt.Errorf("shard %s: after the revert: %w", in.Shard, err))
	}
	if err := dropAll(ctx, conn, n, n.shadow); err != nil {
		return res, activityError(fmt.Errorf("shard %s: after the revert: %w", in.Shard, err))
	}
	return res, nil
}

// CompleteShadow ends a swapped migration on the shard: the reverse
// stream (stopped first by the workflow) and the old table are dropped.
// Revert is not possible afterwards.
func (a *Activities) CompleteShadow(ctx context.Context, in workflows.ShadowInput) (workflows.ShadowResult, error) {
	return a.endShadow(ctx, in, workflows.ShadowSwapped, workflows.ShadowCompleted, func(n shadowNames) string { return n.old })
}

// CancelShadow undoes a migration that has not swapped: the shadow table,
// the forward stream's slot, publication and origin, the copy's progress
// and the record go. A shard with nothing of the migration is done.
func (a *Activities) CancelShadow(ctx context.Context, in workflows.ShadowInput) (workflows.ShadowResult, error) {
	conn, n, rec, err := a.shadowStep(ctx, in)
	if err != nil {
		return workflows.ShadowResult{}, activityError(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	stop := beatEvery(ctx, 5*time.Second, func() any { return nil })
	defer stop()
	if rec != nil && rec.state != workflows.ShadowPrepared && rec.state != workflows.ShadowCopied && rec.state != workflows.ShadowCancelled {
		return workflows.ShadowResult{}, refuse(pgerr.ObjectNotInPrerequisiteState, "shard %s: the table has swapped (%s): revert it instead", in.Shard, rec.state)
	}
	// Without a record, a shadow table of this name may still be an
	// attempt's whose record never committed: PrepareShadow makes both in
	// one transaction, so none is there.
	if rec == nil {
		return workflows.ShadowResult{State: workflows.ShadowCancelled, AlreadyDone: true}, dropStreams(ctx, conn, n)
	}
	if err := dropAll(ctx, conn, n, n.shadow); err != nil {
		return workflows.ShadowResult{}, activityError(fmt.Errorf("shard %s: cancelling: %w", in.Shard, err))
	}
	if _, err := conn.Exec(ctx, "UPDATE _tessera.shadow_migrations SET state = $2, updated_at = now() WHERE id = $1", in.MigrationID, workflows.ShadowCancelled); err != nil {
		return workflows.ShadowResult{}, activityError(err)
	}
	return workflows.ShadowResult{State: workflows.ShadowCancelled}, nil
}

func (a *Activities) endShadow(ctx context.Context, in workflows.ShadowInput, from, to string, drop func(shadowNames) string) (workflows.ShadowResult, error) {
	conn, n, rec, err := a.shadowStep(ctx, in)
	if err != nil {
		return workflows.ShadowResult{}, activityError(err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	stop := beatEvery(ctx, 5*time.Second, func() any { return nil })
	defer stop()
	switch {
	case rec != nil && rec.state == to:
		return workflows.ShadowResult{State: to, AlreadyDone: true}, nil
	case rec == nil || rec.state != from:
		return workflows.ShadowResult{}, refuse(pgerr.ObjectNotInPrerequisiteState, "shard %s: the migration is not %s", in.Shard, from)
	}
	if err := dropAll(ctx, conn, n, drop(n)); err != nil {
		return workflows.ShadowResult{}, activityError(fmt.Errorf("shard %s: %w", in.Shard, err))
	}
	if _, err := conn.Exec(ctx, "UPDATE _tessera.shadow_migrations SET state = $2, updated_at = now() WHERE id = $1", in.MigrationID, to); err != nil {
		return workflows.ShadowResult{}, activityError(err)
	}
	return workflows.ShadowResult{State: to}, nil
}

// dropAll drops both streams and the table set aside.
func dropAll(ctx context.Context, conn *pgx.Conn, n shadowNames, table string) error {
	if err := dropStreams(ctx, conn, n); err != nil {
		return err
	}
	_, err := conn.Exec(ctx, "DROP TABLE IF EXISTS "+n.qual(table))
	return err
}

func dropStreams(ctx context.Context, conn *pgx.Conn, n shadowNames) error {
	for _, forward := range []bool{true, false} {
		if err := dropStream(ctx, conn, n, forward); err != nil {
			return err
		}
	}
	return nil
}
