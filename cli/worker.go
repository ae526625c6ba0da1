package cli

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/tlsfiles"
	"github.com/tesseradb/tessera/worker"
)

func newWorkerCommand() *cobra.Command {
	var flags clusterFlags
	var tflags temporalFlags
	var cfg worker.Config
	var sidecarTLS tlsfiles.Client
	var debugAddr, logLevel, metricsAddr string
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "Run a Temporal worker for Tessera's operations, with an admin",
		Long: `Run a Temporal worker that executes Tessera's operation workflows (Failover,
Switchover, SetDurability, Rejoin, RepairShard, Reshard) from the "tessera"
task queue. A reshard's copies and streams of a shard that has a Replicator
("tessera replicator --shard") run there instead; those of other shards run
here.

With --admin (the default) it also runs an admin: it follows every sidecar's
health and, while it holds recovery leadership (one admin of all that run
does), starts a failover when a primary stays down for --detect-window, a
rejoin when an old primary comes back, and a repair when replication or
synchronous_standby_names disagree with the shard's state. Run as many
workers as you like against one cluster.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if err := serveDebug(debugAddr); err != nil {
				return err
			}
			var err error
			if cfg.EtcdEndpoints, cfg.Cluster, err = flags.locate(); err != nil {
				return err
			}
			if cfg.Secret, err = flags.secret(); err != nil {
				return err
			}
			if cfg.Etcd, err = flags.etcdOptions(); err != nil {
				return err
			}
			if cfg.TemporalTLS, err = tflags.tls.Config(); err != nil {
				return fmt.Errorf("Temporal TLS: %w", err)
			}
			if cfg.TLS, err = sidecarTLS.Config(); err != nil {
				return fmt.Errorf("sidecar TLS: %w", err)
			}
			cfg.TemporalAddr, cfg.Namespace = tflags.address(), tflags.namespace
			if cfg.Logger, err = newLogger(cmd.ErrOrStderr(), logLevel); err != nil {
				return err
			}
			reg := prometheus.NewRegistry()
			cfg.Metrics = reg
			served, err := serveMetrics(metricsAddr, reg)
			if err != nil {
				return err
			}
			if served != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "worker metrics on http://%s/metrics\n", served)
			}
			return worker.Run(ctx, cfg)
		},
	}
	flags.register(cmd)
	tflags.register(cmd, &flags.dataDir)
	f := cmd.Flags()
	tlsClientFlags(f, "sidecar", "the sidecars", &sidecarTLS)
	f.BoolVar(&cfg.Admin, "admin", true, "also run an admin (health monitor and recovery-leadership candidate)")
	f.DurationVar(&cfg.AdminConfig.DetectWindow, "detect-window", 0, "how long a primary must be down before it is failed over (default 1.5s)")
	f.StringVar(&cfg.ID, "id", "", "name in discovery and the admin election (default host-pid)")
	f.StringVar(&cfg.ReplicatorUser, "replicator-user", "postgres", "Postgres user the Replicator's activities (Reshard) connect to shard primaries as")
	f.StringVar(&cfg.ReplicatorPasswordFile, "replicator-password-file", os.Getenv("TESSERA_REPLICATOR_PASSWORD_FILE"),
		"file holding that user's password (env TESSERA_REPLICATOR_PASSWORD_FILE); without it Reshard fails at its first step")
	logLevelFlag(cmd, &logLevel)
	metricsFlag(cmd, &metricsAddr)
	debugFlag(cmd, &debugAddr)
	return cmd
}
