package store

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tesseradb/tessera/topo"
)

// Snapshot is one revision of the topology document. It is immutable and
// shared by every reader.
type Snapshot struct {
	Revision int64
	Topology *topo.Topology

	// modRevision is the etcd revision of the write, which tells a watcher
	// re-reading after a broken watch whether the document changed.
	modRevision int64
	// superseded is closed by the Watcher that published the snapshot when
	// it publishes a newer one; nil for snapshots no watcher tracks.
	superseded chan struct{}
}

// Superseded returns a channel closed when a Watcher replaces this snapshot
// with a newer one, so that caches built from it (query plans) know to
// rebuild. For a snapshot from GetTopology, which no watcher tracks, the
// channel is never closed.
func (s *Snapshot) Superseded() <-chan struct{} { return s.superseded }

// AnyRevision as ApplyOptions.ExpectedRevision writes whatever revision is
// stored.
const AnyRevision = -1

// ApplyOptions control ApplyTopology.
type ApplyOptions struct {
	// ExpectedRevision makes the write a compare-and-swap: it is refused
	// with a *RevisionMismatchError unless the stored revision is exactly
	// this one, where 0 means none may be stored yet (the zero value).
	// AnyRevision skips the check.
	ExpectedRevision int64
	// Force skips the placement guard. Only data-movement workflows, which
	// move the rows themselves, should set it.
	Force bool
}

// GetTopology returns the stored topology. The error is ErrNoTopology when
// none is stored and an *InvalidTopologyError when the stored document does
// not parse.
func (s *Store) GetTopology(ctx context.Context) (*Snapshot, error) {
	resp, err := s.cli.Get(ctx, s.TopologyKey())
	if err != nil {
		return nil, fmt.Errorf("reading topology: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, fmt.Errorf("cluster %q: %w", s.cluster, ErrNoTopology)
	}
	return decodeTopology(resp.Kvs[0])
}

func decodeTopology(kv *mvccpb.KeyValue) (*Snapshot, error) {
	t, err := topo.Parse(kv.Value)
	if err != nil {
		return nil, &InvalidTopologyError{Key: string(kv.Key), Revision: kv.Version, Err: err}
	}
	return &Snapshot{Revision: kv.Version, Topology: t, modRevision: kv.ModRevision}, nil
}

// ApplyTopology stores t and returns its revision. Unless opts.Force is
// set it refuses, with a *PlacementChangeError, a topology that changes the
// placement of any table of the stored one (see topo.Diff); the check and
// the write are one atomic step, since the write only succeeds if the
// document read for the check is still the stored one. A topology equal to
// the stored one is not written again, and its revision is returned.
func (s *Store) ApplyTopology(ctx context.Context, t *topo.Topology, opts ApplyOptions) (int64, error) {
	if t == nil {
		return 0, errors.New("store: ApplyTopology of a nil topology")
	}
	doc, err := t.MarshalJSON()
	if err != nil {
		return 0, fmt.Errorf("encoding topology: %w", err)
	}
	// Check the bytes that will be stored, not t: watchers will parse
	// these, and t need not have come from topo.Parse.
	next, err := topo.Parse(doc)
	if err != nil {
		return 0, fmt.Errorf("encoding topology: %w", err)
	}
	key := s.TopologyKey()
	for {
		resp, err := s.cli.Get(ctx, key)
		if err != nil {
			return 0, fmt.Errorf("reading topology: %w", err)
		}
		var stored *mvccpb.KeyValue
		var version int64
		if len(resp.Kvs) > 0 {
			stored, version = resp.Kvs[0], resp.Kvs[0].Version
		}
		if opts.ExpectedRevision >= 0 && version != opts.ExpectedRevision {
			return 0, &RevisionMismatchError{Expected: opts.ExpectedRevision, Actual: version}
		}
		if stored != nil {
			if bytes.Equal(stored.Value, doc) {
				return version, nil
			}
			if !opts.Force {
				if err := guardPlacement(stored, next); err != nil {
					return 0, err
				}
			}
		}
		txn, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.Version(key), "=", version)).
			Then(clientv3.OpPut(key, string(doc))).
			Commit()
		if err != nil {
			return 0, fmt.Errorf("writing topology: %w", err)
		}
		if txn.Succeeded {
			return version + 1, nil
		}
		// Another writer got in between the read and the write. Read
		// again, so that the checks judge against their document.
	}
}

// guardPlacement refuses next if it changes the placement of any table of
// the stored document.
func guardPlacement(stored *mvccpb.KeyValue, next *topo.Topology) error {
	cur, err := decodeTopology(stored)
	if err != nil {
		return fmt.Errorf("cannot check placement against the stored topology, so apply with force to replace it: %w", err)
	}
	if changes := topo.Diff(cur.Topology, next); len(changes) > 0 {
		return &PlacementChangeError{Changes: changes}
	}
	return nil
}
