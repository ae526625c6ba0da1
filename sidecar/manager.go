package sidecar

import (
	"context"

	"github.com/tesseradb/tessera/pgmanager"
)

// Manager is what the sidecar needs of the Postgres instance it fronts;
// *pgmanager.Instance provides it. The operation RPCs delegate to it.
type Manager interface {
	Status(ctx context.Context) (pgmanager.Status, error)
	Promote(ctx context.Context) error
	Fence(ctx context.Context) error
	Unfence(ctx context.Context) error
	SetSynchronousStandbys(ctx context.Context, names string) error
	FollowPrimary(ctx context.Context, primary pgmanager.Endpoint) error
	Rewind(ctx context.Context, primary pgmanager.Endpoint) error
	// ConnConfig is a connection string for database and user over the
	// instance's private socket, which trusts whoever can reach it.
	ConnConfig(database, user string) string
	DataDir() string
}
