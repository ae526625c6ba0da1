package router

import (
	"context"
	"crypto/tls"
	"sort"
	"sync"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/sidecar"
	"github.com/tesseradb/tessera/topo/store"
)

// shards knows the sidecars of every shard, from the service-discovery
// records in the topology service, and keeps one gRPC connection to each.
type shards struct {
	secret string
	tls    *tls.Config

	mu        sync.RWMutex
	instances map[string]*instance // by instance id
	ready     chan struct{}        // closed once the first list arrived
	once      sync.Once
}

// instance is one sidecar the router can reach.
type instance struct {
	rec    store.Record
	client *sidecar.Client
}

func newShards(secret string, tlsConfig *tls.Config) *shards {
	return &shards{secret: secret, tls: tlsConfig, instances: map[string]*instance{}, ready: make(chan struct{})}
}

// follow keeps the instance list current until ctx ends.
func (s *shards) follow(ctx context.Context, st *store.Store) error {
	updates, err := st.WatchRecords(ctx, store.KindSidecar)
	if err != nil {
		return err
	}
	go func() {
		for recs := range updates {
			s.update(recs)
		}
		s.closeAll()
	}()
	return nil
}

func (s *shards) update(recs []store.Record) {
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	for _, rec := range recs {
		seen[rec.InstanceID] = true
		cur := s.instances[rec.InstanceID]
		if cur != nil && cur.rec.GRPCAddr == rec.GRPCAddr {
			cur.rec = rec
			continue
		}
		if cur != nil {
			cur.client.Close()
		}
		client, err := sidecar.Dial(rec.GRPCAddr, s.dialOptions())
		if err != nil {
			continue
		}
		s.instances[rec.InstanceID] = &instance{rec: rec, client: client}
	}
	for id, in := range s.instances {
		if !seen[id] {
			in.client.Close()
			delete(s.instances, id)
		}
	}
	s.once.Do(func() { close(s.ready) })
}

func (s *shards) dialOptions() sidecar.DialOptions {
	return sidecar.DialOptions{Secret: s.secret, TLS: s.tls}
}

func (s *shards) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, in := range s.instances {
		in.client.Close()
		delete(s.instances, id)
	}
}

// pick returns the shard's primary, or a replica when replica is set.
// Reads sent to replicas never fall back to the primary.
func (s *shards) pick(shard string, replica bool) (*instance, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	var candidates []*instance
	for _, in := range s.instances {
		if in.rec.ShardUID != shard {
			continue
		}
		if (in.rec.Role == store.RolePrimary) != replica {
			candidates = append(candidates, in)
		}
	}
	if len(candidates) == 0 {
		role := "primary"
		if replica {
			role = "replica"
		}
		return nil, pgerr.New("08006", "shard %s has no %s available", shard, role)
	}
	sort.Slice(candidates, func(i, j int) bool { return candidates[i].rec.InstanceID < candidates[j].rec.InstanceID })
	return candidates[0], nil
}
