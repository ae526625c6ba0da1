package sidecar

import (
	"net/http"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Prometheus metrics of a sidecar (docs/operations.md, "Metrics and query
// insights"), read when scraped: the hot path only counts the slow path's
// waits and timeouts, on the pool it already holds.

// poolCounters are what a pool counts for its metrics.
type poolCounters struct {
	waits, timeouts atomic.Uint64
}

var (
	poolOpenDesc = prometheus.NewDesc("tessera_sidecar_pool_connections",
		"Connections the pool has open to Postgres (idle, in use or being dialled).", []string{"shard", "instance", "database", "user"}, nil)
	poolIdleDesc = prometheus.NewDesc("tessera_sidecar_pool_idle_connections",
		"Connections idle in the pool.", []string{"shard", "instance", "database", "user"}, nil)
	poolWaitingDesc = prometheus.NewDesc("tessera_sidecar_pool_waiting",
		"Requests waiting for a connection now.", []string{"shard", "instance", "database", "user"}, nil)
	poolWaitsDesc = prometheus.NewDesc("tessera_sidecar_pool_waits_total",
		"Requests that had to wait for a connection: the pool was at capacity.", []string{"shard", "instance", "database", "user"}, nil)
	poolTimeoutsDesc = prometheus.NewDesc("tessera_sidecar_pool_timeouts_total",
		"Requests refused (53300) after waiting the pool's MaxWait.", []string{"shard", "instance", "database", "user"}, nil)
	lagBytesDesc = prometheus.NewDesc("tessera_sidecar_replication_lag_bytes",
		"WAL a replica has received but not replayed (0 on a primary).", []string{"shard", "instance"}, nil)
	lagSecondsDesc = prometheus.NewDesc("tessera_sidecar_replication_replay_lag_seconds",
		"How far a replica's replay is behind, as Postgres reports it.", []string{"shard", "instance"}, nil)
	servingDesc = prometheus.NewDesc("tessera_sidecar_serving",
		"1 when Postgres is up and the sidecar serves it.", []string{"shard", "instance", "role"}, nil)
)

// sidecarCollector reads the pools and the last health status.
type sidecarCollector struct{ s *Server }

func (c sidecarCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{poolOpenDesc, poolIdleDesc, poolWaitingDesc, poolWaitsDesc, poolTimeoutsDesc,
		lagBytesDesc, lagSecondsDesc, servingDesc} {
		ch <- d
	}
}

func (c sidecarCollector) Collect(ch chan<- prometheus.Metric) {
	shard, inst := c.s.cfg.ShardUID, c.s.cfg.InstanceID
	for _, p := range c.s.pools.all() {
		p.mu.Lock()
		open, idle, waiting := p.open, len(p.idle), len(p.waiters)
		p.mu.Unlock()
		ch <- prometheus.MustNewConstMetric(poolOpenDesc, prometheus.GaugeValue, float64(open), shard, inst, p.database, p.user)
		ch <- prometheus.MustNewConstMetric(poolIdleDesc, prometheus.GaugeValue, float64(idle), shard, inst, p.database, p.user)
		ch <- prometheus.MustNewConstMetric(poolWaitingDesc, prometheus.GaugeValue, float64(waiting), shard, inst, p.database, p.user)
		ch <- prometheus.MustNewConstMetric(poolWaitsDesc, prometheus.CounterValue, float64(p.counters.waits.Load()), shard, inst, p.database, p.user)
		ch <- prometheus.MustNewConstMetric(poolTimeoutsDesc, prometheus.CounterValue, float64(p.counters.timeouts.Load()), shard, inst, p.database, p.user)
	}
	c.s.health.mu.Lock()
	st := c.s.health.current
	c.s.health.mu.Unlock()
	if st == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(lagBytesDesc, prometheus.GaugeValue, float64(st.LagBytes), shard, inst)
	ch <- prometheus.MustNewConstMetric(lagSecondsDesc, prometheus.GaugeValue, float64(st.ReplayLagMs)/1000, shard, inst)
	serving := 0.0
	if st.Serving {
		serving = 1
	}
	ch <- prometheus.MustNewConstMetric(servingDesc, prometheus.GaugeValue, serving, shard, inst, st.Role)
}

// Registry holds the sidecar's metrics, for a process that serves them.
func (s *Server) Registry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(sidecarCollector{s})
	return reg
}

// MetricsHandler serves the sidecar's metrics in Prometheus's format.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.Registry(), promhttp.HandlerOpts{})
}
