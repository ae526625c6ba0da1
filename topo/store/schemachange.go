package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
)

// Schema changes. Routers keep what they read of the catalog (column
// types and lists, aggregates) and their plans; DDL through a router
// clears its own, but not another router's, and a schema change that
// OnlineDDL makes on the shards directly clears none. Whoever changes a
// database's schema announces it here, and every router that sees the
// announcement forgets its catalog and plans. The record lives at
// /tessera/<cluster>/schema_changes/<database>; only its change matters,
// so each database keeps one record, rewritten by every announcement.

// SchemaChange announces that Database's schema changed.
type SchemaChange struct {
	Database string `json:"database"`
	// By names who changed it: a router, or an OnlineDDL migration.
	By string `json:"by,omitempty"`
	// At is when, by the announcer's clock (shown, never compared).
	At time.Time `json:"at,omitzero"`
	// Revision is the etcd mod revision it was read at (not stored).
	Revision int64 `json:"-"`
}

func (s *Store) schemaChangePrefix() string { return s.prefix + "schema_changes/" }

// AnnounceSchemaChange records that c.Database's schema changed.
func (s *Store) AnnounceSchemaChange(ctx context.Context, c SchemaChange) error {
	if c.Database == "" || strings.Contains(c.Database, "/") {
		return fmt.Errorf("invalid schema change: database %q is empty or contains '/'", c.Database)
	}
	doc, err := json.Marshal(c)
	if err != nil {
		return err
	}
	if _, err := s.cli.Put(ctx, s.schemaChangePrefix()+c.Database, string(doc)); err != nil {
		return fmt.Errorf("announcing a schema change of %s: %w", c.Database, err)
	}
	return nil
}

func decodeSchemaChange(prefix string, kv *mvccpb.KeyValue) (SchemaChange, bool) {
	var c SchemaChange
	if json.Unmarshal(kv.Value, &c) != nil || prefix+c.Database != string(kv.Key) {
		return SchemaChange{}, false
	}
	c.Revision = kv.ModRevision
	return c, true
}

// WatchSchemaChanges sends every database's last announcement, sorted by
// database, first as they are now and again after every change (and
// after a watch that had to start over, when changes may have been
// missed), until ctx ends or the client is closed; then it closes the
// channel.
func (s *Store) WatchSchemaChanges(ctx context.Context) (<-chan []SchemaChange, error) {
	return watchList(ctx, s.cli, s.schemaChangePrefix(), "schema changes", func(prefix string, kvs []*mvccpb.KeyValue) []SchemaChange {
		return decodedList(prefix, kvs, decodeSchemaChange, func(c SchemaChange) string { return c.Database })
	})
}
