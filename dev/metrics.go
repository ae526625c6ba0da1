package dev

import (
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Metrics gathers, when scraped, the metrics of the cluster's router, its
// sidecars (labelled by shard and instance) and its worker (the Temporal
// SDK's), for tessera dev's /metrics.
func (c *Cluster) Metrics() prometheus.Gatherer {
	return prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) {
		gs := prometheus.Gatherers{c.workerMetrics}
		if c.router != nil {
			gs = append(gs, c.router.Registry())
		}
		c.mu.Lock()
		for _, sh := range c.shards {
			for _, in := range sh.instances {
				if in.sc != nil {
					gs = append(gs, in.sc.Registry())
				}
			}
		}
		c.mu.Unlock()
		return gs.Gather()
	})
}
