package worker

import (
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
)

// Temporal's SDK reports workflow and activity durations, task latencies,
// polls and failures through a client.MetricsHandler; PrometheusMetrics
// turns them into Prometheus metrics (docs/operations.md). The SDK's own
// contrib bridge needs tally, which this module does not carry; the
// interface is small. Names are the SDK's (temporal_activity_execution_latency,
// temporal_workflow_endtoend_latency, ...), timers in seconds with a
// _seconds suffix, and the SDK's tags become labels.

// PrometheusMetrics returns a Temporal metrics handler that registers its
// metrics in reg as the SDK first reports each.
func PrometheusMetrics(reg prometheus.Registerer) client.MetricsHandler {
	return &promHandler{vecs: &promVecs{reg: reg, m: map[string]any{}}}
}

// metricsHandler is reg's handler, or none without a registry.
func metricsHandler(reg prometheus.Registerer) client.MetricsHandler {
	if reg == nil {
		return nil
	}
	return PrometheusMetrics(reg)
}

type promHandler struct {
	vecs *promVecs
	tags map[string]string
}

// promVecs are the metric families made so far, by name and label names:
// the SDK reports one name with one set of tags, and a second set of
// tags for a name would be refused by Prometheus, so its values are
// dropped.
type promVecs struct {
	reg prometheus.Registerer
	mu  sync.Mutex
	m   map[string]any
}

func (h *promHandler) WithTags(tags map[string]string) client.MetricsHandler {
	merged := maps.Clone(h.tags)
	if merged == nil {
		merged = map[string]string{}
	}
	maps.Copy(merged, tags)
	return &promHandler{vecs: h.vecs, tags: merged}
}

func (h *promHandler) labels() ([]string, prometheus.Labels) {
	names := slices.Sorted(maps.Keys(h.tags))
	return names, prometheus.Labels(h.tags)
}

// family returns the family of name with these label names, made by
// newFamily the first time; nil when name was registered with other labels.
func (v *promVecs) family(name string, labels []string, newFamily func() prometheus.Collector) prometheus.Collector {
	key := name + "\x00" + strings.Join(labels, "\x00")
	v.mu.Lock()
	defer v.mu.Unlock()
	if c, ok := v.m[key]; ok {
		col, _ := c.(prometheus.Collector)
		return col
	}
	c := newFamily()
	if err := v.reg.Register(c); err != nil {
		v.m[key] = nil
		return nil
	}
	v.m[key] = c
	return c
}

func (h *promHandler) Counter(name string) client.MetricsCounter {
	names, values := h.labels()
	c := h.vecs.family(name, names, func() prometheus.Collector {
		return prometheus.NewCounterVec(prometheus.CounterOpts{Name: name, Help: "Temporal SDK counter " + name + "."}, names)
	})
	if c == nil {
		return client.MetricsNopHandler.Counter(name)
	}
	return promCounter{c.(*prometheus.CounterVec).With(values)}
}

func (h *promHandler) Gauge(name string) client.MetricsGauge {
	names, values := h.labels()
	c := h.vecs.family(name, names, func() prometheus.Collector {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: name, Help: "Temporal SDK gauge " + name + "."}, names)
	})
	if c == nil {
		return client.MetricsNopHandler.Gauge(name)
	}
	return promGauge{c.(*prometheus.GaugeVec).With(values)}
}

func (h *promHandler) Timer(name string) client.MetricsTimer {
	names, values := h.labels()
	c := h.vecs.family(name+"_seconds", names, func() prometheus.Collector {
		return prometheus.NewHistogramVec(prometheus.HistogramOpts{Name: name + "_seconds", Help: "Temporal SDK timer " + name + ".",
			Buckets: prometheus.ExponentialBuckets(0.001, 4, 12)}, names)
	})
	if c == nil {
		return client.MetricsNopHandler.Timer(name)
	}
	return promTimer{c.(*prometheus.HistogramVec).With(values)}
}

type promCounter struct{ c prometheus.Counter }

func (c promCounter) Inc(n int64) { c.c.Add(float64(n)) }

type promGauge struct{ g prometheus.Gauge }

func (g promGauge) Update(v float64) { g.g.Set(v) }

type promTimer struct{ o prometheus.Observer }

func (t promTimer) Record(d time.Duration) { t.o.Observe(d.Seconds()) }
