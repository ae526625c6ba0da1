package activities

import (
	"context"
	"crypto/tls"
	"errors"
	"log/slog"
	"sync"

	"github.com/tesseradb/tessera/sidecar"
	"github.com/tesseradb/tessera/topo/store"
)

// Config is what the activities need to reach a cluster.
type Config struct {
	// Store is the cluster's topology service: discovery records say where
	// each instance's sidecar listens, ShardState is written here.
	Store *store.Store
	// Secret is the cluster credential sidecars require.
	Secret string
	// TLS, when set, is used to dial sidecars.
	TLS    *tls.Config
	Logger *slog.Logger
}

// Activities are the high-availability steps. Register them with
// workflows.Register; one value serves any number of concurrent workflows.
type Activities struct {
	cfg Config
	log *slog.Logger

	mu      sync.Mutex
	clients map[string]*sidecar.Client // by gRPC address
}

// New returns Activities for the cluster cfg describes.
func New(cfg Config) (*Activities, error) {
	if cfg.Store == nil {
		return nil, errors.New("activities: a topology store is required")
	}
	if cfg.Secret == "" {
		return nil, errors.New("activities: the cluster secret is required")
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Activities{cfg: cfg, log: log, clients: map[string]*sidecar.Client{}}, nil
}

// Close closes the cached sidecar connections.
func (a *Activities) Close() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for addr, c := range a.clients {
		c.Close()
		delete(a.clients, addr)
	}
}

// client returns a connection to the sidecar at addr, dialling it once.
// Connections are lazy and reconnect by themselves, so a cached one stays
// good while its sidecar restarts on the same address.
func (a *Activities) client(addr string) (*sidecar.Client, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if c, ok := a.clients[addr]; ok {
		return c, nil
	}
	c, err := sidecar.Dial(addr, sidecar.DialOptions{Secret: a.cfg.Secret, TLS: a.cfg.TLS})
	if err != nil {
		return nil, err
	}
	a.clients[addr] = c
	return c, nil
}

// shardRecords returns the discovery records of the shard's sidecars,
// sorted by instance id (records are sorted by id, which is the instance
// id for sidecars).
func (a *Activities) shardRecords(ctx context.Context, shard string) ([]store.Record, error) {
	recs, err := a.cfg.Store.ListRecords(ctx, store.KindSidecar)
	if err != nil {
		return nil, passOn(err)
	}
	var out []store.Record
	for _, r := range recs {
		if r.ShardUID == shard {
			out = append(out, r)
		}
	}
	return out, nil
}

// record returns the discovery record of one instance of a shard. An
// instance without one has no live sidecar; that may change (it is
// restarting), so the error is retryable.
func (a *Activities) record(ctx context.Context, shard, instance string) (store.Record, error) {
	if shard == "" || instance == "" {
		return store.Record{}, Refuse(invalidParameter, "shard and instance are required")
	}
	recs, err := a.shardRecords(ctx, shard)
	if err != nil {
		return store.Record{}, err
	}
	for _, r := range recs {
		if r.InstanceID == instance {
			return r, nil
		}
	}
	return store.Record{}, failure(connectionFailure, "instance %s of shard %s has no live sidecar", instance, shard)
}

// dial returns the record of an instance and a client for its sidecar.
func (a *Activities) dial(ctx context.Context, shard, instance string) (store.Record, *sidecar.Client, error) {
	rec, err := a.record(ctx, shard, instance)
	if err != nil {
		return rec, nil, err
	}
	c, err := a.client(rec.GRPCAddr)
	if err != nil {
		return rec, nil, failure(connectionFailure, "dialling the sidecar of %s at %s: %v", instance, rec.GRPCAddr, err)
	}
	return rec, c, nil
}
