package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/dev"
)

func newDevCommand(opts Options) *cobra.Command {
	var cfg dev.Config
	var printJSON, verbose bool
	withTemporal := true
	var debugAddr, metricsAddr string
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run a whole local cluster on 127.0.0.1 until Ctrl-C",
		Long: `Run a whole Tessera cluster on 127.0.0.1 in one process: an embedded etcd,
an embedded Temporal server with its Web UI, and shards of real Postgres (a
primary and streaming replicas each, under pgmanager, with a sidecar each).

Everything lives under --data; running the command again resumes the same
cluster. The addresses are printed and written to DATA/cluster.json.
Ctrl-C or SIGTERM stops everything and leaves no process behind.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if cmd.Flags().Changed("replicas") && cfg.Replicas == 0 {
				cfg.NoReplicas = true
			}
			level := slog.LevelWarn
			if verbose {
				level = slog.LevelInfo
			}
			cfg.Logger = slog.New(slog.NewTextHandler(cmd.ErrOrStderr(), &slog.HandlerOptions{Level: level}))
			if withTemporal {
				cfg.Temporal = opts.Temporal
			}
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := serveDebug(debugAddr); err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "starting the cluster ...")
			cluster, err := dev.Start(ctx, cfg)
			if err != nil {
				return err
			}
			info := cluster.Info()
			printSummary(cmd.ErrOrStderr(), info, cfg.Password, cfg.Temporal != nil)
			// Metrics on a known port, or another free one if it is taken.
			served, err := serveMetrics(metricsAddr, cluster.Metrics())
			if err != nil {
				served, err = serveMetrics("127.0.0.1:0", cluster.Metrics())
			}
			if err == nil && served != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "  metrics     http://%s/metrics (router, sidecars, worker)\n", served)
			}
			if printJSON {
				data, _ := json.Marshal(info)
				fmt.Fprintln(cmd.OutOrStdout(), string(data))
			}
			<-ctx.Done()
			fmt.Fprintln(cmd.ErrOrStderr(), "stopping the cluster ...")
			sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), time.Minute)
			defer cancel()
			if err := cluster.Stop(sctx); err != nil {
				return err
			}
			fmt.Fprintln(cmd.ErrOrStderr(), "stopped")
			return nil
		},
	}
	f := cmd.Flags()
	f.StringVar(&cfg.DataDir, "data", ".tessera", "directory holding the cluster's data; running again resumes it")
	f.IntVar(&cfg.Shards, "shards", 3, "shards named shard-0 ... shard-{N-1} (shard-0 holds the authoritative group)")
	f.IntVar(&cfg.Replicas, "replicas", 1, "streaming replicas per shard")
	f.StringVar(&cfg.TopologyFile, "topology", "", "data topology to apply (default: every table in the authoritative group); shards it names are created")
	f.StringVar(&cfg.Password, "password", "postgres", "password of the superuser postgres on every instance")
	f.StringVar(&cfg.Cluster, "cluster", "default", "cluster name in the topology service")
	f.IntVar(&cfg.BasePort, "base-port", 5433, "first Postgres port")
	f.IntVar(&cfg.EtcdPort, "etcd-port", 2379, "etcd client port (another free one if taken)")
	f.IntVar(&cfg.RouterPort, "router-port", 6432, "port clients connect to")
	f.BoolVar(&cfg.RouterOverSockets, "router-over-sockets", false, "the router reaches the sidecars by their unix sockets, as from another process, instead of by function call (benchmarks compare)")
	f.BoolVar(&withTemporal, "temporal", true, "run the embedded Temporal server with a worker and the failover monitor (false: no operations workflows, no automatic failover; benchmarks use it)")
	autoPrepareFlag(cmd, &cfg.NoAutoPrepare)
	commitFlag(cmd, &cfg.Commit)
	memoryFlags(cmd, &cfg.RouterMemory)
	f.IntVar(&cfg.PipelineConns, "pipeline-conns", 0, "connections per pool that autocommit statements share, pipelined (0: one per CPU; -1: none, every statement gets a connection of its own)")
	f.IntVar(&cfg.TemporalPort, "temporal-port", 7233, "Temporal frontend port")
	f.IntVar(&cfg.TemporalUIPort, "temporal-ui-port", 8233, "Temporal Web UI port")
	f.StringVar(&cfg.BinDir, "pg-bindir", "", "directory of the Postgres server binaries (default: discovered)")
	f.BoolVar(&printJSON, "print-json", false, "print cluster.json on stdout once the cluster is up, for scripts")
	f.BoolVar(&verbose, "verbose", false, "log what every component does")
	f.StringVar(&metricsAddr, "metrics-addr", "127.0.0.1:9187", "serve the router's, sidecars' and worker's Prometheus metrics at http://ADDR/metrics (another free port if taken; empty: none)")
	debugFlag(cmd, &debugAddr)
	return cmd
}

func printSummary(w io.Writer, info dev.Info, password string, temporal bool) {
	fmt.Fprintf(w, "Tessera dev cluster %q is up (data in %s)\n", info.Cluster, info.DataDir)
	if info.Router != "" {
		fmt.Fprintf(w, "  connect     postgres://postgres:%s@%s/postgres\n", password, info.Router)
	}
	fmt.Fprintf(w, "  etcd        %s\n", strings.Join(info.Etcd, ","))
	if temporal {
		fmt.Fprintf(w, "  temporal    %s   web UI %s\n", info.Temporal, info.TemporalUI)
	}
	for _, s := range info.Shards {
		var parts []string
		for _, in := range s.Instances {
			parts = append(parts, fmt.Sprintf("%s %s 127.0.0.1:%d", in.ID, in.Role, in.Port))
		}
		fmt.Fprintf(w, "  %-11s %s\n", s.UID, strings.Join(parts, ", "))
	}
	fmt.Fprintf(w, "Addresses are in %s/cluster.json. `tessera status` shows health. Ctrl-C stops everything.\n", info.DataDir)
}
