package worker

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// TestPrometheusMetrics reports through the handler as the Temporal SDK
// does (tags added on the way, then a timer, a counter and a gauge) and
// reads the registry back.
func TestPrometheusMetrics(t *testing.T) {
	reg := prometheus.NewRegistry()
	h := PrometheusMetrics(reg).WithTags(map[string]string{"namespace": "default"})
	act := h.WithTags(map[string]string{"activity_type": "PromoteInstance"})
	act.Timer("temporal_activity_execution_latency").Record(1500 * time.Millisecond)
	act.Timer("temporal_activity_execution_latency").Record(500 * time.Millisecond)
	act.Counter("temporal_activity_execution_failed").Inc(2)
	h.Gauge("temporal_num_pollers").Update(3)
	// The same name with other tags is dropped, not a panic.
	h.Counter("temporal_activity_execution_failed").Inc(1)

	want := `
# HELP temporal_activity_execution_failed Temporal SDK counter temporal_activity_execution_failed.
# TYPE temporal_activity_execution_failed counter
temporal_activity_execution_failed{activity_type="PromoteInstance",namespace="default"} 2
# HELP temporal_num_pollers Temporal SDK gauge temporal_num_pollers.
# TYPE temporal_num_pollers gauge
temporal_num_pollers{namespace="default"} 3
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "temporal_activity_execution_failed", "temporal_num_pollers"); err != nil {
		t.Fatal(err)
	}
	if n := testutil.CollectAndCount(reg, "temporal_activity_execution_latency_seconds"); n != 1 {
		t.Fatalf("latency series: %d, want 1", n)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "temporal_activity_execution_latency_seconds" {
			h := mf.GetMetric()[0].GetHistogram()
			if h.GetSampleCount() != 2 || h.GetSampleSum() != 2.0 {
				t.Fatalf("latency: %d samples, sum %v; want 2, 2s", h.GetSampleCount(), h.GetSampleSum())
			}
		}
	}
}
