package e2e

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/tesseradb/tessera/docker/grafana"
	tessworker "github.com/tesseradb/tessera/worker"
)

// TestTemporalMetrics runs a workflow with an activity on the package's
// Temporal through a client whose metrics go to Prometheus
// (worker.PrometheusMetrics, as tessera worker --metrics-addr does):
// the workflow's and the activity's durations are recorded.
func TestTemporalMetrics(t *testing.T) {
	ctx := testContext(t)
	reg := prometheus.NewRegistry()
	c, err := client.Dial(client.Options{HostPort: temporalSrv.FrontendAddr(), MetricsHandler: tessworker.PrometheusMetrics(reg),
		Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	const queue = "tessera-metrics-test"
	w := sdkworker.New(c, queue, sdkworker.Options{})
	w.RegisterWorkflow(greetWorkflow)
	w.RegisterActivity(greetActivity)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "metrics-greet", TaskQueue: queue}, greetWorkflow, "metrics")
	if err != nil {
		t.Fatal(err)
	}
	var out string
	if err := run.Get(ctx, &out); err != nil {
		t.Fatal(err)
	}
	// The worker records the workflow's end-to-end latency after it
	// answers the last workflow task, which may be after run.Get returns:
	// gather until both durations are there, for a few seconds.
	var samples map[string]uint64
	var mfs []*dto.MetricFamily
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if mfs, err = reg.Gather(); err != nil {
			t.Fatal(err)
		}
		samples = greetSamples(mfs)
		if samples["temporal_activity_execution_latency_seconds"] >= 1 && samples["temporal_workflow_endtoend_latency_seconds"] >= 1 ||
			time.Now().After(deadline) {
			break
		}
	}
	t.Logf("histogram samples of the workflow and its activity: %v", samples)
	for _, name := range []string{"temporal_activity_execution_latency_seconds", "temporal_workflow_endtoend_latency_seconds"} {
		if samples[name] != 1 {
			t.Errorf("%s: %d samples, want 1", name, samples[name])
		}
	}
	// The Grafana dashboard (docker/grafana) reads the worker's metrics
	// under the names exported here.
	names, err := grafana.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, mf := range mfs {
		exported[mf.GetName()] = true
	}
	read := 0
	for _, name := range names {
		if strings.HasPrefix(name, "temporal_") {
			read++
			if !exported[name] {
				t.Errorf("the dashboard reads %s, which the worker does not export", name)
			}
		}
	}
	if read == 0 {
		t.Error("the dashboard reads none of the worker's metrics")
	}
}

// greetSamples counts the histogram samples of greetWorkflow's and
// greetActivity's metrics, by metric name.
func greetSamples(mfs []*dto.MetricFamily) map[string]uint64 {
	samples := map[string]uint64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			ours := false
			for _, l := range m.GetLabel() {
				ours = ours || l.GetName() == "activity_type" && l.GetValue() == "greetActivity" ||
					l.GetName() == "workflow_type" && l.GetValue() == "greetWorkflow"
			}
			if h := m.GetHistogram(); ours && h != nil {
				samples[mf.GetName()] += h.GetSampleCount()
			}
		}
	}
	return samples
}
