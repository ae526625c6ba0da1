package onlineddl

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// Connector returns the connection string of a shard primary's database;
// the string holds a password and must not be logged or returned.
// replicator/actions.DiscoveryConnector is one.
type Connector interface {
	ConnString(ctx context.Context, shard, database string) (string, error)
}

// Activities are OnlineDDL's and SchemaCheck's activities. One value
// serves any number of concurrent workflows.
type Activities struct {
	// Store is the topology service, read for the shards.
	Store *store.Store
	Conn  Connector
}

// Register registers the activities under the names the workflows call
// them by.
func (a *Activities) Register(r worker.Registry) {
	for name, fn := range map[string]any{
		workflows.PlanOnlineDDLActivity: a.PlanOnlineDDL,
		workflows.ApplyDDLActivity:      a.ApplyDDL,
		workflows.CheckSchemaActivity:   a.CheckSchema,

		workflows.PrepareShadowActivity:  a.PrepareShadow,
		workflows.CopyShadowActivity:     a.CopyShadow,
		workflows.SwapShadowActivity:     a.SwapShadow,
		workflows.StreamShadowActivity:   a.StreamShadow,
		workflows.RevertShadowActivity:   a.RevertShadow,
		workflows.CompleteShadowActivity: a.CompleteShadow,
		workflows.CancelShadowActivity:   a.CancelShadow,
	} {
		r.RegisterActivityWithOptions(fn, activity.RegisterOptions{Name: name})
	}
}

func (a *Activities) connect(ctx context.Context, shard, database string) (*pgx.Conn, error) {
	url, err := a.Conn.ConnString(ctx, shard, database)
	if err != nil {
		return nil, fmt.Errorf("shard %s: %w", shard, err)
	}
	conn, err := pgx.Connect(ctx, url)
	if err != nil {
		// pgx's error names host and user, not the password.
		return nil, fmt.Errorf("connecting to shard %s: %w", shard, err)
	}
	return conn, nil
}

// everyShard lists the shards to look at: the given ones, each checked
// against the topology, or every shard of the topology, the authoritative
// one first (as the router's DDL runs).
func (a *Activities) everyShard(ctx context.Context, given []string) ([]string, error) {
	snap, err := a.Store.GetTopology(ctx)
	if err != nil {
		return nil, err
	}
	if snap == nil || snap.Topology == nil {
		return nil, refuse(pgerr.ObjectNotInPrerequisiteState, "no topology is stored")
	}
	top := snap.Topology
	all := top.Shards()
	if len(given) > 0 {
		for _, s := range given {
			if !slices.Contains(all, s) {
				return nil, refuse(pgerr.UndefinedObject, "shard %s is not in the topology", s)
			}
		}
		return given, nil
	}
	auth := top.AuthoritativeShard()
	out := []string{auth}
	for _, s := range all {
		if s != auth {
			out = append(out, s)
		}
	}
	return out, nil
}

// refuse is a failure retrying cannot cure.
func refuse(code, format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), code, nil)
}

// activityError turns an error into a Temporal failure whose Type is its
// SQLSTATE. Retried: a lock not granted in time (55P03), an object in use,
// deadlocks and serialization failures, a server shutting down or out of
// resources, a lost connection, a shard without a recorded primary.
// Final: anything the statement itself is refused for (a column that
// exists, a syntax error, a unique index over duplicates).
func activityError(err error) error {
	if err == nil {
		return nil
	}
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) || errors.Is(err, context.Canceled) {
		return err
	}
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		// Tessera's own: a missing password file (F0000) or a bad input
		// is final; a shard without a recorded primary (a failover under
		// way) passes.
		code := pgerr.Code(err)
		switch code[:2] {
		case "F0", "22", "42":
			return temporal.NewNonRetryableApplicationError(err.Error(), code, nil)
		case "XX":
			code = "08006"
		}
		return temporal.NewApplicationError(err.Error(), code)
	}
	code := pgErr.Code
	switch {
	case code == "55P03", code == "55006", code[:2] == "08", code[:2] == "40",
		code[:2] == "53", code[:2] == "57", code[:2] == "58":
		return temporal.NewApplicationError(err.Error(), code)
	}
	return temporal.NewNonRetryableApplicationError(err.Error(), code, nil)
}
