package router

import (
	"net/http"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/tesseradb/tessera/router/planner"
)

// Prometheus metrics (docs/operations.md, "Metrics and query insights").
// A statement here is what a client asks for in one go: a Query message,
// or the extended-protocol messages up to a Sync. Its kind is that of its
// first statement. The hot path touches only children resolved
// beforehand: per kind for the server, per database and kind once per
// session (sessionMetrics).

// kindCount bounds planner.Kind; index 0 is a statement the router did not
// plan (a syntax error Postgres reports, a Sync with nothing to run).
const kindCount = int(planner.Empty) + 1

func kindLabel(k planner.Kind) string {
	if k == 0 {
		return "other"
	}
	return k.String()
}

// routerMetrics are one router's collectors, in a registry of its own so
// that several routers can run in one process (tests, tessera dev).
type routerMetrics struct {
	reg        *prometheus.Registry
	statements *prometheus.CounterVec // database, kind
	duration   [kindCount]prometheus.Observer
	errors     *prometheus.CounterVec // sqlstate
	shards     prometheus.Observer
	scatters   prometheus.Counter
	refused    prometheus.Counter

	mu         sync.Mutex
	byDatabase map[string]*[kindCount]prometheus.Counter
}

func newRouterMetrics(s *Server) *routerMetrics {
	m := &routerMetrics{
		reg: prometheus.NewRegistry(),
		statements: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tessera_router_statements_total", Help: "Statements run, by database and kind of the first statement.",
		}, []string{"database", "kind"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tessera_router_statement_errors_total", Help: "Statements that failed, by the SQLSTATE of their first error.",
		}, []string{"sqlstate"}),
		scatters: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tessera_router_multishard_statements_total", Help: "Statements that ran on more than one shard.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "tessera_router_drain_refused_connections_total", Help: "Connections refused with 57P03 while the router drained.",
		}),
		byDatabase: map[string]*[kindCount]prometheus.Counter{},
	}
	duration := prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "tessera_router_statement_duration_seconds", Help: "Statement latency in the router, from the client's message to the answer's end, by kind.",
		Buckets: prometheus.ExponentialBuckets(0.0001, 2.5, 14),
	}, []string{"kind"})
	for k := range kindCount {
		m.duration[k] = duration.WithLabelValues(kindLabel(planner.Kind(k)))
	}
	shards := prometheus.NewHistogram(prometheus.HistogramOpts{
		Name: "tessera_router_statement_shards", Help: "Shard calls per statement.",
		Buckets: []float64{0, 1, 2, 3, 4, 8, 16, 32, 64},
	})
	m.shards = shards
	m.reg.MustRegister(m.statements, duration, m.errors, shards, m.scatters, m.refused,
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tessera_router_sessions", Help: "Client connections open."},
			func() float64 { return float64(s.sessionCount()) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tessera_router_plan_cache_hits_total", Help: "Plans answered from the plan cache."},
			func() float64 { return float64(s.planner.Stats().Hits) }),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "tessera_router_plan_cache_misses_total", Help: "Plans made anew."},
			func() float64 { return float64(s.planner.Stats().Misses) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tessera_router_plan_cache_entries", Help: "Plans cached."},
			func() float64 { return float64(s.planner.Stats().Entries) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "tessera_router_query_stats_entries", Help: "Normalized statements tessera.query_stats holds."},
			func() float64 { return float64(s.queryStats.len()) }),
	)
	if s.buffers != nil {
		s.buffers.metrics.register(m.reg, s.buffers)
	}
	return m
}

// forDatabase returns the statement counters of a database, one per kind,
// made once per database (the map is read once per session, not per
// statement).
func (m *routerMetrics) forDatabase(db string) *[kindCount]prometheus.Counter {
	m.mu.Lock()
	defer m.mu.Unlock()
	if c := m.byDatabase[db]; c != nil {
		return c
	}
	c := new([kindCount]prometheus.Counter)
	for k := range kindCount {
		c[k] = m.statements.WithLabelValues(db, kindLabel(planner.Kind(k)))
	}
	m.byDatabase[db] = c
	return c
}

// MetricsHandler serves the router's metrics in Prometheus's format.
func (s *Server) MetricsHandler() http.Handler {
	return promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{})
}

// Registry is the router's metrics registry, for a process that serves
// other metrics beside them.
func (s *Server) Registry() *prometheus.Registry { return s.metrics.reg }
