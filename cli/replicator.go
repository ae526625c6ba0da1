package cli

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/worker"
)

func newReplicatorCommand() *cobra.Command {
	var flags clusterFlags
	var tflags temporalFlags
	var cfg worker.ReplicatorConfig
	var debugAddr, logLevel string
	cmd := &cobra.Command{
		Use:   "replicator",
		Short: "Run the Replicator beside one shard's primary, on that shard's task queue",
		Long: `Run the Replicator beside one shard's primary (next to its sidecar): a
Temporal worker polling task queue "replicator-<shard>" that runs the Reshard
workflow's copies (CopyTables) and change streams (StreamChanges) reading
that shard, one heartbeating activity per stream. It registers itself in
discovery; a reshard planned while it is registered routes the shard's
copies and streams to it (and to the targets' replicators for the reverse
streams). A shard without one has them run by the general workers
("tessera worker") as before.

It connects to the shard's primary (and to the targets) as
--replicator-user with the password in --replicator-password-file, read at
every connection; the password is never on the command line or in logs.`,
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
			cfg.TemporalAddr, cfg.Namespace = tflags.address(), tflags.namespace
			if cfg.Etcd, err = flags.etcdOptions(); err != nil {
				return err
			}
			if cfg.TemporalTLS, err = tflags.tls.Config(); err != nil {
				return fmt.Errorf("Temporal TLS: %w", err)
			}
			if cfg.Logger, err = newLogger(cmd.ErrOrStderr(), logLevel); err != nil {
				return err
			}
			return worker.RunReplicator(ctx, cfg)
		},
	}
	flags.register(cmd)
	// It reaches Postgres, never a sidecar: no cluster credential.
	cmd.PersistentFlags().MarkHidden("secret-file")
	tflags.register(cmd, &flags.dataDir)
	f := cmd.Flags()
	f.StringVar(&cfg.Shard, "shard", "", "the shard whose primary it runs beside (required)")
	f.StringVar(&cfg.ID, "id", "", "name in discovery (default <shard>-host-pid)")
	f.StringVar(&cfg.ReplicatorUser, "replicator-user", "postgres", "Postgres user it connects to the shard primaries as")
	f.StringVar(&cfg.ReplicatorPasswordFile, "replicator-password-file", os.Getenv("TESSERA_REPLICATOR_PASSWORD_FILE"),
		"file holding that user's password (env TESSERA_REPLICATOR_PASSWORD_FILE; required)")
	logLevelFlag(cmd, &logLevel)
	debugFlag(cmd, &debugAddr)
	return cmd
}
