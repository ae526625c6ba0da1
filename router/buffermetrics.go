package router

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// bufferMetrics count what buffering did for statements: how many waited,
// how each wait ended, and how long it lasted, for the two kinds of
// buffer (a shard's primary changing, buffer.go; a cutover's tables,
// tablebuffer.go).
type bufferMetrics struct {
	ended *prometheus.CounterVec   // buffer, outcome
	wait  *prometheus.HistogramVec // buffer
}

func newBufferMetrics() *bufferMetrics {
	return &bufferMetrics{
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "tessera_router_buffered_statements_total",
			Help: "Statements that waited in a buffer, by buffer (primary: a shard's primary changing; table: a cutover's tables) and how the wait ended (released, timeout, full, cancelled).",
		}, []string{"buffer", "outcome"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "tessera_router_buffer_wait_seconds",
			Help:    "How long statements waited in a buffer, by buffer.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 13),
		}, []string{"buffer"}),
	}
}

// register adds the collectors, and a gauge of the statements waiting now.
func (m *bufferMetrics) register(reg *prometheus.Registry, b *buffers) {
	reg.MustRegister(m.ended, m.wait, prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "tessera_router_buffered_statements_waiting", Help: "Statements waiting in a buffer now.",
	}, func() float64 { return float64(b.waiting.Load()) }))
}

// observe records one wait that began at start and ended with err.
func (m *bufferMetrics) observe(buffer string, start time.Time, err error) {
	if m == nil {
		return
	}
	outcome := "released"
	switch {
	case err == nil:
	case errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		outcome = "cancelled"
	case strings.Contains(err.Error(), "buffer is full"):
		outcome = "full"
	default:
		outcome = "timeout"
	}
	m.ended.WithLabelValues(buffer, outcome).Inc()
	m.wait.WithLabelValues(buffer).Observe(time.Since(start).Seconds())
}
