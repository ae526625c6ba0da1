package actions

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// heartbeatEvery is how often the long activities heartbeat; the workflow
// gives them a heartbeat timeout many times this.
const heartbeatEvery = time.Second

// Actions are the Replicator's activities. One value serves any number of
// concurrent workflows.
type Actions struct {
	// Store is the topology service PlanReshard reads.
	Store *store.Store
	// Conn reaches shard primaries directly.
	Conn Connector
	// CopyBatchRows bounds the batches CopyTables copies (each a
	// transaction with its progress row on every target); zero means
	// replicator.DefaultBatchRows. A killed copy repeats at most one.
	CopyBatchRows int
	// diffChunkRows, set by tests, is the VDiff's chunk size (zero:
	// replicator.DefaultDiffChunkRows).
	diffChunkRows int
}

// Register registers the activities under the names the Reshard and
// MoveTables workflows call them by, which read as steps in the Temporal UI.
func (a *Actions) Register(r worker.Registry) {
	for name, fn := range map[string]any{
		workflows.PlanReshardActivity:    a.PlanReshard,
		workflows.PlanMoveTablesActivity: a.PlanMoveTables,
		workflows.CopyTablesActivity:     a.CopyTables,
		workflows.StreamChangesActivity:  a.StreamChanges,
		workflows.StreamLagActivity:      a.StreamLag,
		workflows.DiffTablesActivity:     a.DiffTables,
		workflows.CleanupReshardActivity: a.CleanupReshard,
		workflows.ResetMovementActivity:  a.ResetMovement,
		// The cutover (SwitchTraffic) and Complete.
		workflows.CheckCutoverActivity:     a.CheckCutover,
		workflows.SetTableBufferActivity:   a.SetTableBuffer,
		workflows.FenceSourcesActivity:     a.FenceSources,
		workflows.SetSequencesActivity:     a.SetSequences,
		workflows.PrepareReverseActivity:   a.PrepareReverse,
		workflows.SwitchTopologyActivity:   a.SwitchTopology,
		workflows.WaitRoutersActivity:      a.WaitRouters,
		workflows.ClearTableBufferActivity: a.ClearTableBuffer,
		workflows.UnfenceSourcesActivity:   a.UnfenceSources,
		workflows.CompleteReshardActivity:  a.CompleteReshard,
		// A SwitchTraffic of reads only, and its undo.
		workflows.SwitchReplicaReadsActivity: a.SwitchReplicaReads,
	} {
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
}

// connect opens a connection to a shard primary's database.
func (a *Actions) connect(ctx context.Context, shard, database string) (*pgx.Conn, string, error) {
	url, err := a.Conn.ConnString(ctx, shard, database)
	if err != nil {
		return nil, "", activityError(fmt.Errorf("shard %s: %w", shard, err))
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		// pgx's error names host and user, not the password.
		return nil, "", activityError(fmt.Errorf("connecting to shard %s: %w", shard, err))
	}
	return conn, url, nil
}

// refuse is a failure retrying cannot cure.
func refuse(code, format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), code, nil)
}

// activityError turns an error into a Temporal failure whose Type is its
// SQLSTATE: final for invalid input, refused credentials, unsupported
// features and objects in the wrong state (a table without a usable key);
// retried otherwise (a server restarting, a network blip).
func activityError(err error) error {
	if err == nil {
		return nil
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		// Itself, not wrapped: Temporal reads the retry decision and the
		// type from the error returned, not from one it wraps.
		return appErr
	}
	if errors.Is(err, context.Canceled) {
		return err
	}
	code := pgerr.Code(err)
	switch code[:2] {
	case "22", "42", "0A", "28", "55", "F0":
		// An object in use (a slot a dying attempt still holds) or one
		// that exists (its temporary slot) passes when that attempt ends.
		if code != "55006" && code != "42710" {
			return temporal.NewNonRetryableApplicationError(err.Error(), code, nil)
		}
	}
	return temporal.NewApplicationError(err.Error(), code)
}

// closeAll closes connections, ignoring errors: they end an attempt.
func closeAll(conns ...*pgx.Conn) {
	for _, c := range conns {
		if c != nil {
			c.Close(context.Background())
		}
	}
}
