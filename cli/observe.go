package cli

import (
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/spf13/cobra"
)

// logLevelFlag adds --log-level (env TESSERA_LOG_LEVEL): debug, info,
// warn or error. Logs carry no passwords, secrets or row values.
func logLevelFlag(cmd *cobra.Command, level *string) {
	cmd.Flags().StringVar(level, "log-level", envOr("TESSERA_LOG_LEVEL", "info"), "log level: debug, info, warn or error (env TESSERA_LOG_LEVEL)")
}

// newLogger validates the level and returns a structured text logger.
func newLogger(w io.Writer, level string) (*slog.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.ToLower(level))); err != nil {
		return nil, fmt.Errorf("--log-level %q: debug, info, warn or error", level)
	}
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// metricsFlag adds --metrics-addr (env TESSERA_METRICS_ADDR), where the
// process serves Prometheus metrics at /metrics.
func metricsFlag(cmd *cobra.Command, addr *string) {
	cmd.Flags().StringVar(addr, "metrics-addr", os.Getenv("TESSERA_METRICS_ADDR"),
		"serve Prometheus metrics at http://ADDR/metrics (for example 127.0.0.1:9187; env TESSERA_METRICS_ADDR; empty: none)")
}

// serveMetrics serves the component's metrics, with the Go runtime's and
// the process's, on addr; "" serves nothing. It listens before returning,
// so that a taken port fails the start.
func serveMetrics(addr string, component prometheus.Gatherer) (string, error) {
	if addr == "" {
		return "", nil
	}
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return "", fmt.Errorf("metrics address: %w", err)
	}
	runtime := prometheus.NewRegistry()
	runtime.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(prometheus.Gatherers{component, runtime}, promhttp.HandlerOpts{}))
	go http.Serve(lis, mux)
	return lis.Addr().String(), nil
}
