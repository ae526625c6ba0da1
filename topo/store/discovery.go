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

// Kind is the kind of process a discovery record describes.
type Kind string

// The kinds of Tessera process that register themselves.
const (
	KindRouter  Kind = "router"
	KindSidecar Kind = "sidecar"
	KindWorker  Kind = "worker"
	// KindReplicator is a Replicator (`tessera replicator`) beside one
	// shard's primary; its record names the shard.
	KindReplicator Kind = "replicator"
)

// The roles of the Postgres instance a sidecar runs beside.
const (
	RolePrimary = "primary"
	RoleReplica = "replica"
)

func (k Kind) check() error {
	switch k {
	case KindRouter, KindSidecar, KindWorker, KindReplicator:
		return nil
	}
	return fmt.Errorf("unknown process kind %q (want router, sidecar, worker or replicator)", k)
}

// Record says where a live process can be reached. Its key is
// /tessera/<cluster>/discovery/<kind>/<id>.
type Record struct {
	Kind Kind   `json:"kind"`
	ID   string `json:"id"`
	// ShardUID, InstanceID and Role describe the Postgres instance a
	// sidecar runs beside; they are required for sidecars.
	ShardUID   string `json:"shard_uid,omitempty"`
	InstanceID string `json:"instance_id,omitempty"`
	Role       string `json:"role,omitempty"` // RolePrimary or RoleReplica
	Zone       string `json:"zone,omitempty"`
	// PostgresAddr is the host:port of the instance's Postgres server.
	PostgresAddr string `json:"postgres_addr,omitempty"`
	// GRPCAddr is the host:port of the process's gRPC service.
	GRPCAddr string `json:"grpc_addr,omitempty"`
	// SessionAddr is a sidecar's framed session port, the routers' fast
	// path for query traffic.
	SessionAddr string `json:"session_addr,omitempty"`
	// SessionSocket is the unix socket path where the same framed session
	// port also listens, for routers on the sidecar's machine: a cheaper
	// hop than loopback TCP.
	SessionSocket string `json:"session_socket,omitempty"`
	// Addr is the process's own client-facing host:port, such as a
	// router's Postgres protocol listener.
	Addr string `json:"addr,omitempty"`
	// TopologyRevision is, for a router, the revision of the topology it
	// routes by: a cutover ends its table buffer only once every live
	// router has reached the revision that moved the tables.
	TopologyRevision int64     `json:"topology_revision,omitempty"`
	Started          time.Time `json:"started,omitzero"`
}

// Check reports what is wrong with the record, if anything.
func (r Record) Check() error {
	var errs []error
	if err := r.Kind.check(); err != nil {
		errs = append(errs, err)
	}
	switch {
	case r.ID == "":
		errs = append(errs, errors.New("id is empty"))
	case strings.Contains(r.ID, "/"):
		errs = append(errs, fmt.Errorf("id %q contains '/'", r.ID))
	}
	if r.Kind == KindSidecar {
		if r.ShardUID == "" {
			errs = append(errs, errors.New("a sidecar record needs a shard_uid"))
		}
		if r.InstanceID == "" {
			errs = append(errs, errors.New("a sidecar record needs an instance_id"))
		}
		if r.Role != RolePrimary && r.Role != RoleReplica {
			errs = append(errs, fmt.Errorf("a sidecar record's role is %q, not primary or replica", r.Role))
		}
	}
	if r.Kind == KindReplicator && r.ShardUID == "" {
		errs = append(errs, errors.New("a replicator record needs a shard_uid"))
	}
	if len(errs) > 0 {
		return fmt.Errorf("invalid %s record %q: %w", r.Kind, r.ID, errors.Join(errs...))
	}
	return nil
}

// kindPrefix returns the prefix of every record of a kind.
func (s *Store) kindPrefix(kind Kind) string { return s.prefix + "discovery/" + string(kind) + "/" }

// RecordKey returns the etcd key of the record of a kind and id.
func (s *Store) RecordKey(kind Kind, id string) string { return s.kindPrefix(kind) + id }

// decodeRecord decodes a record, refusing one that does not match its key.
func decodeRecord(prefix string, kv *mvccpb.KeyValue) (Record, bool) {
	var r Record
	if json.Unmarshal(kv.Value, &r) != nil || r.Check() != nil || prefix+r.ID != string(kv.Key) {
		return Record{}, false
	}
	return r, true
}

// ListRecords returns the live records of a kind, sorted by ID. Keys under
// the kind's prefix that do not hold a valid record are skipped: only
// Register writes there, and one bad key must not hide every other process.
func (s *Store) ListRecords(ctx context.Context, kind Kind) ([]Record, error) {
	if err := kind.check(); err != nil {
		return nil, err
	}
	prefix := s.kindPrefix(kind)
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("reading %s records: %w", kind, err)
	}
	return recordList(prefix, resp.Kvs), nil
}

func recordList(prefix string, kvs []*mvccpb.KeyValue) []Record {
	return decodedList(prefix, kvs, decodeRecord, func(r Record) string { return r.ID })
}

// WatchRecords sends the live records of a kind, sorted by ID, first as
// they are now and again after every change. It runs a goroutine until ctx
// ends or the client is closed, then closes the channel. A reader that
// falls behind holds the goroutine back but misses nothing. etcd failures
// are retried quietly; meanwhile the last list sent stands.
func (s *Store) WatchRecords(ctx context.Context, kind Kind) (<-chan []Record, error) {
	if err := kind.check(); err != nil {
		return nil, err
	}
	return watchList(ctx, s.cli, s.kindPrefix(kind), string(kind)+" records", recordList)
}
