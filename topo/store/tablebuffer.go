package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Table buffers. A cutover moves some tables of a database (a shard
// group's, for a reshard) while the rest of their shards keep serving, so
// it asks routers to hold only the statements that touch those tables,
// not the whole shard as a switchover's ShardState.Buffer does. The
// workflow sets a TableBuffer before it fences the source tables and
// clears it once every router has applied the topology that moved them
// (Record.TopologyRevision), or when it undoes the cutover. It lives at
// /tessera/<cluster>/table_buffers/<id>, id naming the workflow.

// TableBuffer asks routers to hold new statements that touch any of
// Tables in Database for For at most, measured by each router's clock from
// when it sees the signal (as BufferSignal's For).
type TableBuffer struct {
	// ID names the signal, one per workflow; the key's last element.
	ID       string `json:"id"`
	Database string `json:"database"`
	// Tables are "schema.name", as the planner names relations.
	Tables []string `json:"tables"`
	Reason string   `json:"reason"`
	// For is how long a router holds statements, from when it sees this
	// signal; past it, held statements are planned and sent as usual.
	For time.Duration `json:"for"`
	// Set is when it was set, by the setter's clock: it tells a signal set
	// again from the last, and is never compared with another clock.
	Set time.Time `json:"set,omitzero"`
	// Revision is the etcd mod revision it was read at (not stored).
	Revision int64 `json:"-"`
}

// Check reports what is wrong with the signal, if anything.
func (b TableBuffer) Check() error {
	var errs []error
	if b.ID == "" || strings.Contains(b.ID, "/") {
		errs = append(errs, fmt.Errorf("id %q is empty or contains '/'", b.ID))
	}
	if b.Database == "" {
		errs = append(errs, errors.New("database is empty"))
	}
	if len(b.Tables) == 0 {
		errs = append(errs, errors.New("no tables"))
	}
	for _, t := range b.Tables {
		if schema, name, ok := strings.Cut(t, "."); !ok || schema == "" || name == "" {
			errs = append(errs, fmt.Errorf("table %q is not schema.name", t))
		}
	}
	if b.For <= 0 {
		errs = append(errs, errors.New("for must be positive"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid table buffer %q: %w", b.ID, errors.Join(errs...))
	}
	return nil
}

func (s *Store) tableBufferPrefix() string { return s.prefix + "table_buffers/" }

// TableBufferKey is the etcd key of the table buffer with id.
func (s *Store) TableBufferKey(id string) string { return s.tableBufferPrefix() + id }

func decodeTableBuffer(prefix string, kv *mvccpb.KeyValue) (TableBuffer, bool) {
	var b TableBuffer
	if json.Unmarshal(kv.Value, &b) != nil || prefix+b.ID != string(kv.Key) || b.Check() != nil {
		return TableBuffer{}, false
	}
	b.Revision = kv.ModRevision
	return b, true
}

// SetTableBuffer stores b, replacing any signal with its id; a signal set
// again (a retried activity) with a new Set is new to the routers.
func (s *Store) SetTableBuffer(ctx context.Context, b TableBuffer) error {
	if err := b.Check(); err != nil {
		return err
	}
	doc, err := json.Marshal(b)
	if err != nil {
		return err
	}
	if _, err := s.cli.Put(ctx, s.TableBufferKey(b.ID), string(doc)); err != nil {
		return fmt.Errorf("setting table buffer %s: %w", b.ID, err)
	}
	return nil
}

// ClearTableBuffer removes the signal with id; clearing one that is not
// set is not an error.
func (s *Store) ClearTableBuffer(ctx context.Context, id string) error {
	if _, err := s.cli.Delete(ctx, s.TableBufferKey(id)); err != nil {
		return fmt.Errorf("clearing table buffer %s: %w", id, err)
	}
	return nil
}

// ListTableBuffers returns every valid signal, sorted by id.
func (s *Store) ListTableBuffers(ctx context.Context) ([]TableBuffer, error) {
	resp, err := s.cli.Get(ctx, s.tableBufferPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("reading table buffers: %w", err)
	}
	return tableBufferList(s.tableBufferPrefix(), resp.Kvs), nil
}

func tableBufferList(prefix string, kvs []*mvccpb.KeyValue) []TableBuffer {
	return decodedList(prefix, kvs, decodeTableBuffer, func(b TableBuffer) string { return b.ID })
}

// WatchTableBuffers sends every valid signal, sorted by id, first as they
// are now and again after every change, until ctx ends or the client is
// closed; then it closes the channel.
func (s *Store) WatchTableBuffers(ctx context.Context) (<-chan []TableBuffer, error) {
	return watchList(ctx, s.cli, s.tableBufferPrefix(), "table buffers", tableBufferList)
}
