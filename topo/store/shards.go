package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tesseradb/tessera/pgerr"
)

// Durability is a shard's commit acknowledgement policy, enforced by
// Postgres's synchronous replication.
type Durability string

const (
	// DurabilityAsync: the primary acknowledges commits alone.
	DurabilityAsync Durability = "async"
	// DurabilitySync: one replica confirms each commit. The default.
	DurabilitySync Durability = "sync"
	// DurabilityCrossZoneSync: a replica in another zone than the
	// primary's confirms each commit.
	DurabilityCrossZoneSync Durability = "cross_zone_sync"
)

// Check reports whether d is a known policy; empty means the default.
func (d Durability) Check() error {
	switch d {
	case "", DurabilityAsync, DurabilitySync, DurabilityCrossZoneSync:
		return nil
	}
	return pgerr.New(pgerr.InvalidParameterValue, "durability %q: want async, sync or cross_zone_sync", string(d))
}

// OrDefault returns d, or sync when d is empty.
func (d Durability) OrDefault() Durability {
	if d == "" {
		return DurabilitySync
	}
	return d
}

// ShardState is the control plane's authoritative record of one shard:
// which instance is its primary, the durability policy, and whether
// routers should hold the shard's new statements. Workflows write it;
// routers and the admin watch it. It lives at shards/<shard uid>.
type ShardState struct {
	Shard string `json:"shard"`
	// Primary is the instance id of the shard's primary. Routers send
	// writes only there, whatever an instance says about itself.
	Primary string `json:"primary,omitempty"`
	// Term counts primary changes; each promotion increments it.
	Term int64 `json:"term,omitempty"`
	// Durability is the configured policy; empty means sync.
	Durability Durability `json:"durability,omitempty"`
	// Buffer, when set and not past its Until, asks routers to hold the
	// shard's new statements (a planned switchover or a cutover).
	Buffer *BufferSignal `json:"buffer,omitempty"`
	// Revision is the etcd mod revision the state was read at, for
	// compare-and-swap; it is not stored.
	Revision int64 `json:"-"`
}

// BufferSignal asks routers to buffer a shard for For at most. Workers'
// and routers' clocks need not agree, so a router measures For from when
// it saw the signal, by its own clock; Until (the setter's clock) is for
// people, and for signals written without For.
type BufferSignal struct {
	Reason string    `json:"reason"`
	Until  time.Time `json:"until"`
	// For is how long routers hold statements, from when each sees it.
	For time.Duration `json:"for,omitempty"`
	// Set is when it was set, by the setter's clock: never compared
	// with another clock, it tells a signal set again from the last.
	Set time.Time `json:"set,omitzero"`
}

// Buffering reports whether the state asks to buffer at now by Until,
// which only a clock that agrees with the setter's may use (routers
// measure For instead).
func (s ShardState) Buffering(now time.Time) bool {
	return s.Buffer != nil && now.Before(s.Buffer.Until)
}

func (s *Store) shardPrefix() string { return s.prefix + "shards/" }

// ShardStateKey returns the etcd key of a shard's state.
func (s *Store) ShardStateKey(shard string) string { return s.shardPrefix() + shard }

func decodeShardState(prefix string, kv *mvccpb.KeyValue) (ShardState, bool) {
	var st ShardState
	if json.Unmarshal(kv.Value, &st) != nil || prefix+st.Shard != string(kv.Key) || st.Durability.Check() != nil {
		return ShardState{}, false
	}
	st.Revision = kv.ModRevision
	return st, true
}

// GetShardState reads a shard's state. A shard with none stored gets a
// zero state (Revision 0) naming it. The read is linearizable (etcd's
// default, not WithSerializable): a member cut off from its quorum fails
// it rather than answer from its own copy, which the sidecar's isolation
// fence relies on.
func (s *Store) GetShardState(ctx context.Context, shard string) (ShardState, error) {
	if shard == "" {
		return ShardState{}, errors.New("shard uid is empty")
	}
	resp, err := s.cli.Get(ctx, s.ShardStateKey(shard))
	if err != nil {
		return ShardState{}, fmt.Errorf("reading shard %s state: %w", shard, err)
	}
	if len(resp.Kvs) == 0 {
		return ShardState{Shard: shard}, nil
	}
	st, ok := decodeShardState(s.shardPrefix(), resp.Kvs[0])
	if !ok {
		return ShardState{}, pgerr.New(pgerr.DataCorrupted, "shard %s: the stored state is not valid", shard)
	}
	return st, nil
}

// UpdateShardState reads a shard's state, applies change to it and writes
// it back with compare-and-swap, retrying when another writer got in
// between. change may be called several times; returning an error aborts
// without writing. It returns the state as written.
func (s *Store) UpdateShardState(ctx context.Context, shard string, change func(*ShardState) error) (ShardState, error) {
	for {
		cur, err := s.GetShardState(ctx, shard)
		if err != nil {
			return ShardState{}, err
		}
		next := cur
		if cur.Buffer != nil {
			b := *cur.Buffer
			next.Buffer = &b
		}
		if err := change(&next); err != nil {
			return ShardState{}, err
		}
		next.Shard = shard
		if err := next.Durability.Check(); err != nil {
			return ShardState{}, err
		}
		doc, err := json.Marshal(next)
		if err != nil {
			return ShardState{}, err
		}
		key := s.ShardStateKey(shard)
		resp, err := s.cli.Txn(ctx).
			If(clientv3.Compare(clientv3.ModRevision(key), "=", cur.Revision)).
			Then(clientv3.OpPut(key, string(doc))).
			Commit()
		if err != nil {
			return ShardState{}, fmt.Errorf("writing shard %s state: %w", shard, err)
		}
		if resp.Succeeded {
			next.Revision = resp.Header.Revision
			return next, nil
		}
	}
}

// ListShardStates returns every stored shard state, sorted by shard.
func (s *Store) ListShardStates(ctx context.Context) ([]ShardState, error) {
	resp, err := s.cli.Get(ctx, s.shardPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("reading shard states: %w", err)
	}
	return shardStateList(s.shardPrefix(), resp.Kvs), nil
}

func shardStateList(prefix string, kvs []*mvccpb.KeyValue) []ShardState {
	return decodedList(prefix, kvs, decodeShardState, func(st ShardState) string { return st.Shard })
}

// WatchShardStates sends every shard state, sorted by shard, first as
// they are now and again after every change, until ctx ends or the
// client is closed; then it closes the channel. Invalid documents are
// skipped. etcd failures are retried quietly.
func (s *Store) WatchShardStates(ctx context.Context) (<-chan []ShardState, error) {
	return watchList(ctx, s.cli, s.shardPrefix(), "shard states", shardStateList)
}

// ShardKnown reports whether the cluster has shard: a state is stored for
// it, a sidecar registered an instance of it, or the stored topology
// names it. Operations refuse any other name, so that a typo creates no
// state (which admins would then try to repair).
func (s *Store) ShardKnown(ctx context.Context, shard string) (bool, error) {
	st, err := s.GetShardState(ctx, shard)
	if err != nil {
		return false, err
	}
	if st.Revision != 0 {
		return true, nil
	}
	recs, err := s.ListRecords(ctx, KindSidecar)
	if err != nil {
		return false, err
	}
	for _, r := range recs {
		if r.ShardUID == shard {
			return true, nil
		}
	}
	snap, err := s.GetTopology(ctx)
	if errors.Is(err, ErrNoTopology) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	return slices.Contains(snap.Topology.Shards(), shard), nil
}
