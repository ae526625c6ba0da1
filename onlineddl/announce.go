package onlineddl

import (
	"context"
	"log/slog"
	"time"

	"github.com/tesseradb/tessera/topo/store"
)

// announce tells every router that database's schema changed on a shard
// (store.SchemaChange), so that they forget what they read of its catalog
// and their plans: the migration changed the shard directly, where no
// router saw the DDL. A failed announcement does not fail the change,
// which is made; routers then see it at the next announced change.
func (a *Activities) announce(ctx context.Context, database, migrationID string) {
	if a.Store == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if err := a.Store.AnnounceSchemaChange(ctx, store.SchemaChange{Database: database, By: migrationID, At: time.Now()}); err != nil {
		slog.Warn("announcing a schema change to the routers", "database", database, "migration", migrationID, "error", err)
	}
}
