package router

import (
	"context"
	"time"

	"github.com/tesseradb/tessera/topo/store"
)

// announceTimeout bounds the announcement of a schema change: DDL waits
// for it, so that other routers hear of the change about when its client
// does, but an etcd that does not answer must not hold the client.
const announceTimeout = 2 * time.Second

// followSchemaChanges makes the router forget its catalog and plans
// whenever a schema change is announced (store.SchemaChange): another
// router ran DDL, or an OnlineDDL migration changed the shards directly.
// Each router forgets its own when it runs DDL; this is for the others'.
func (s *Server) followSchemaChanges(ctx context.Context) error {
	changes, err := s.cfg.Store.WatchSchemaChanges(ctx)
	if err != nil {
		return err
	}
	// As they stand: nothing to forget yet, but the epoch of statement
	// names is the latest change's, as on every other router.
	s.noteSchemaEpochOf(<-changes)
	go func() {
		for list := range changes {
			s.noteSchemaEpochOf(list)
			s.schemaChanged()
		}
	}()
	return nil
}

// announceSchemaChange tells every router that database's schema changed
// (this one's DDL has cleared its own catalog already).
func (s *Server) announceSchemaChange(database string) {
	ctx, cancel := context.WithTimeout(context.Background(), announceTimeout)
	defer cancel()
	at := time.Now()
	s.noteSchemaEpoch(at)
	err := s.cfg.Store.AnnounceSchemaChange(ctx, store.SchemaChange{Database: database, By: "router " + s.Addr(), At: at})
	if err != nil {
		s.cfg.Logger.Warn("announcing a schema change to the other routers", "database", database, "error", err)
	}
}

// noteSchemaEpochOf moves the schema epoch to the latest of changes.
func (s *Server) noteSchemaEpochOf(changes []store.SchemaChange) {
	for _, c := range changes {
		s.noteSchemaEpoch(c.At)
	}
}
