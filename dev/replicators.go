package dev

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/tesseradb/tessera/worker"
)

// replicatorPasswordFile holds the superuser's password, which the
// worker's and the replicators' Reshard activities connect with.
func (c *Cluster) replicatorPasswordFile() string {
	return filepath.Join(c.cfg.DataDir, "replicator-password")
}

// startReplicator runs the Replicator of a shard inside the cluster
// process, on the shard's own task queue, as `tessera replicator --shard`
// would run beside its primary: reshards planned while it runs copy and
// stream that shard there. Without Temporal there is none.
func (c *Cluster) startReplicator(ctx context.Context, uid string) error {
	if c.temporal == nil {
		return nil
	}
	r, err := worker.StartReplicator(ctx, worker.ReplicatorConfig{
		TemporalAddr:           c.temporal.FrontendAddr(),
		EtcdEndpoints:          c.info.Etcd,
		Cluster:                c.cfg.Cluster,
		Shard:                  uid,
		ID:                     "dev-" + uid,
		Logger:                 c.log,
		ReplicatorPasswordFile: c.replicatorPasswordFile(),
	})
	if err != nil {
		return fmt.Errorf("starting the replicator of %s: %w", uid, err)
	}
	c.mu.Lock()
	c.replicators[uid] = r
	c.mu.Unlock()
	return nil
}

// stopReplicators stops every replicator, first of all: their streams
// read the shards.
func (c *Cluster) stopReplicators(ctx context.Context) {
	c.mu.Lock()
	reps := c.replicators
	c.replicators = map[string]*worker.Replicator{}
	c.mu.Unlock()
	for _, r := range reps {
		r.Stop(ctx)
	}
}
