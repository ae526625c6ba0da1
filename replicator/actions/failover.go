package actions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/workflows"
)

// A source's failover during a movement: Postgres does not carry logical
// slots to a promoted replica, so the stream's slot is gone with the old
// primary, and a slot created on the new one starts later: streaming
// from it would skip the changes in between (a silent gap), and the old
// primary may even have sent the stream changes the new one never had.
// The copy and stream activities therefore compare each source's term
// (store.ShardState.Term, moved by every promotion) with the one the
// plan holds from before the slot was made, and fail with
// workflows.SourceFailoverError when it moved or the slot is missing;
// the workflow restarts the movement from a new snapshot.

// termPoll is how often a running stream reads its source's term.
const termPoll = 2 * time.Second

// sourceFailedOver is the activity's failure for a source whose slot
// cannot be trusted: final, of a type of its own.
func sourceFailedOver(shard string, planned, now int64, why string) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(
		"SQLSTATE %s: source shard %s failed over (term %d when its slot was made, %d now): %s; the movement must restart from a new snapshot",
		pgerr.ObjectNotInPrerequisiteState, shard, planned, now, why), workflows.SourceFailoverError, nil)
}

// checkTerm fails with sourceFailedOver when shard's term is not the one
// the plan recorded. A plan without a term for the shard (an import's
// external source, a plan made before terms were recorded) passes.
func (a *Actions) checkTerm(ctx context.Context, plan workflows.ReshardPlan, shard string) error {
	want, ok := plan.Terms[shard]
	if !ok {
		return nil
	}
	st, err := a.Store.GetShardState(ctx, shard)
	if err != nil {
		return activityError(fmt.Errorf("shard %s: %w", shard, err))
	}
	if st.Term != want {
		return sourceFailedOver(shard, want, st.Term, "its primary is now "+st.Primary)
	}
	return nil
}

// shardTerms reads the current term of each shard that has a state.
func (a *Actions) shardTerms(ctx context.Context, shards []string) (map[string]int64, error) {
	out := map[string]int64{}
	for _, s := range shards {
		if s == workflows.ImportSourceShard {
			continue
		}
		st, err := a.Store.GetShardState(ctx, s)
		if err != nil {
			return nil, activityError(fmt.Errorf("shard %s: %w", s, err))
		}
		out[s] = st.Term
	}
	return out, nil
}

// watchTerm runs fn with a context that ends when shard's term moves
// from the plan's (checked every termPoll), and then returns the
// failover error instead of fn's.
func (a *Actions) watchTerm(ctx context.Context, plan workflows.ReshardPlan, shard string, fn func(context.Context) error) error {
	if err := a.checkTerm(ctx, plan, shard); err != nil {
		return err
	}
	if _, ok := plan.Terms[shard]; !ok {
		return fn(ctx)
	}
	wctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	go func() {
		t := time.NewTicker(termPoll)
		defer t.Stop()
		for {
			select {
			case <-wctx.Done():
				return
			case <-t.C:
				var appErr *temporal.ApplicationError
				if err := a.checkTerm(wctx, plan, shard); errors.As(err, &appErr) && appErr.Type() == workflows.SourceFailoverError {
					cancel(err)
					return
				}
			}
		}
	}()
	err := fn(wctx)
	if cause := context.Cause(wctx); cause != nil && ctx.Err() == nil && !errors.Is(cause, context.Canceled) {
		return cause
	}
	if pgerr.Code(err) == pgerr.UndefinedObject && ctx.Err() == nil {
		// The slot is not on the source's primary: a promoted replica
		// whose term the store has not moved yet, or one moved since.
		return sourceFailedOver(shard, plan.Terms[shard], a.termNow(ctx, shard), err.Error())
	}
	return err
}

// copyStarted says whether the targets hold copy progress of the source
// for the plan: a copy from an earlier snapshot, which only the slot made
// with that snapshot may continue.
func copyStarted(ctx context.Context, conn *pgx.Conn, plan workflows.ReshardPlan, source string) (bool, error) {
	var exists bool
	if err := conn.QueryRow(ctx, "SELECT to_regclass('_tessera.copy_progress') IS NOT NULL").Scan(&exists); err != nil || !exists {
		return false, err
	}
	err := conn.QueryRow(ctx, "SELECT EXISTS (SELECT FROM _tessera.copy_progress WHERE workflow = $1 AND source = $2)", plan.Key, source).Scan(&exists)
	return exists, err
}

// checkNoEarlierCopy: the stream's slot is missing on the source's
// primary. If a copy from an earlier snapshot (made with that slot)
// wrote progress on a target, a new slot would start after changes those
// rows lack: the source failed over.
func (a *Actions) checkNoEarlierCopy(ctx context.Context, plan workflows.ReshardPlan, source string) error {
	for _, shard := range plan.Targets {
		conn, _, err := a.connect(ctx, shard, plan.Database)
		if err != nil {
			return err
		}
		started, err := copyStarted(ctx, conn, plan, source)
		closeAll(conn)
		if err != nil {
			return activityError(fmt.Errorf("target %s: %w", shard, err))
		}
		if started {
			now := a.termNow(ctx, source)
			return sourceFailedOver(source, plan.Terms[source], now,
				fmt.Sprintf("slot %s is missing on its primary while %s holds rows copied with it", plan.Slot(source), shard))
		}
	}
	return nil
}

// termNow is shard's term for a message: 0 when unknown.
func (a *Actions) termNow(ctx context.Context, shard string) int64 {
	if a.Store == nil {
		return 0
	}
	st, err := a.Store.GetShardState(ctx, shard)
	if err != nil {
		return 0
	}
	return st.Term
}
