package cli

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/router"
	"github.com/tesseradb/tessera/tlsfiles"
	"github.com/tesseradb/tessera/workflows/launch"
)

func newRouterCommand() *cobra.Command {
	var flags clusterFlags
	var cfg router.Config
	var debugAddr, temporalAddr, namespace string
	var drainGrace time.Duration
	var temporalTLS, sidecarTLS tlsfiles.Client
	var metricsAddr, logLevel string
	cmd := &cobra.Command{
		Use:   "router",
		Short: "Run a router: the Postgres endpoint clients connect to",
		Long: `Run a router, which accepts Postgres wire-protocol connections, authenticates
them against the authoritative shard's roles, and routes each statement by the
data topology to the shards' sidecars. Routers are stateless: run as many as
you like against one cluster.

With --temporal, sessions may SET tessera.ddl_strategy = 'online' (or
'online_wait'): their ALTER TABLE, CREATE INDEX and DROP INDEX statements then
start OnlineDDL migrations on the workers of that Temporal (docs/router.md).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			if cfg.HBAFile != "" {
				if err := router.CheckHBAFile(cfg.HBAFile); err != nil {
					return fmt.Errorf("router host-based rules: %w", err)
				}
			}
			logger, err := newLogger(cmd.ErrOrStderr(), logLevel)
			if err != nil {
				return err
			}
			cfg.Logger = logger
			if err := serveDebug(debugAddr); err != nil {
				return err
			}
			s, err := flags.dial(ctx)
			if err != nil {
				return err
			}
			defer s.Close()
			if cfg.Secret, err = flags.secret(); err != nil {
				return err
			}
			cfg.Store = s
			if cfg.SidecarTLS, err = sidecarTLS.Config(); err != nil {
				return fmt.Errorf("sidecar TLS: %w", err)
			}
			temporalConfig, err := temporalTLS.Config()
			if err != nil {
				return fmt.Errorf("Temporal TLS: %w", err)
			}
			if temporalAddr != "" {
				starter := &launch.RouterOnlineDDL{Addr: temporalAddr, Namespace: namespace, TLS: temporalConfig}
				defer starter.Close()
				cfg.OnlineDDL = starter
				cfg.CommitRecovery = starter.StartCommitRecovery
			}
			r, err := router.New(cfg)
			if err != nil {
				return err
			}
			served, err := serveMetrics(metricsAddr, r.Registry())
			if err != nil {
				return err
			}
			if err := r.Start(ctx); err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "router listening on %s\n", r.Addr())
			if served != "" {
				fmt.Fprintf(cmd.ErrOrStderr(), "router metrics on http://%s/metrics\n", served)
			}
			<-ctx.Done()
			// SIGTERM drains: sessions end between statements, open
			// transactions get the grace period (docs/operations.md).
			dctx := context.WithoutCancel(ctx)
			r.Drain(dctx, drainGrace)
			sctx, cancel := context.WithTimeout(dctx, 10*time.Second)
			defer cancel()
			r.Stop(sctx)
			return nil
		},
	}
	flags.register(cmd)
	cmd.Flags().StringVar(&cfg.ListenAddr, "listen", "127.0.0.1:6432", "address clients connect to")
	cmd.Flags().StringVar(&cfg.TLSCertFile, "tls-cert", "", "certificate for client SSL")
	cmd.Flags().StringVar(&cfg.TLSKeyFile, "tls-key", "", "key for client SSL")
	cmd.Flags().DurationVar(&cfg.AuthTimeout, "auth-timeout", time.Minute, "how long a client has from connecting to logging in (Postgres's authentication_timeout)")
	cmd.Flags().IntVar(&cfg.MaxConnections, "max-connections", 10000, "client connections this router accepts, logged in or not (Postgres's max_connections)")
	cmd.Flags().StringVar(&cfg.HBAFile, "hba-file", "", "file of host-based rules, a subset of pg_hba.conf (docs/router.md); without it every client may try its password")
	cmd.Flags().StringVar(&temporalAddr, "temporal", os.Getenv("TESSERA_TEMPORAL"),
		"Temporal frontend host:port where tessera.ddl_strategy starts OnlineDDL migrations (env TESSERA_TEMPORAL; without it they are refused)")
	cmd.Flags().StringVar(&namespace, "namespace", envOr("TESSERA_NAMESPACE", "default"), "Temporal namespace (env TESSERA_NAMESPACE)")
	tlsClientFlags(cmd.Flags(), "temporal", "Temporal", &temporalTLS)
	tlsClientFlags(cmd.Flags(), "sidecar", "the sidecars", &sidecarTLS)
	cmd.Flags().DurationVar(&drainGrace, "drain-grace", 30*time.Second,
		"on SIGTERM or Ctrl-C, how long running statements and open transactions have to finish before their sessions are ended (57P01)")
	autoPrepareFlag(cmd, &cfg.NoAutoPrepare)
	commitFlag(cmd, &cfg.Commit)
	memoryFlags(cmd, &cfg.Memory)
	metricsFlag(cmd, &metricsAddr)
	logLevelFlag(cmd, &logLevel)
	debugFlag(cmd, &debugAddr)
	return cmd
}

// commitFlag registers --commit, tessera.commit's default.
func commitFlag(cmd *cobra.Command, mode *string) {
	cmd.Flags().StringVar(mode, "commit", envOr("TESSERA_COMMIT", "atomic"),
		"tessera.commit for sessions that do not set it: atomic (two-phase commit across shards) or best_effort (shard after shard); give every router the same (env TESSERA_COMMIT)")
}

// autoPrepareFlag registers --auto-prepare, which sets the router's
// default for tessera.auto_prepare.
func autoPrepareFlag(cmd *cobra.Command, off *bool) {
	cmd.Flags().Var((*negatedBool)(off), "auto-prepare", "run simple-protocol reads as prepared statements unless a session sets tessera.auto_prepare = off (--auto-prepare=false: only where a session sets it on)")
	cmd.Flags().Lookup("auto-prepare").NoOptDefVal = "true"
}

// memoryFlags registers the router's memory budget, spill directory and
// spill quota (router.MemoryConfig), sizes as Postgres writes them.
func memoryFlags(cmd *cobra.Command, m *router.MemoryConfig) {
	cmd.Flags().Var((*sizeFlag)(&m.Budget), "memory", "what all the router's queries may hold at once in sorts, aggregations and DISTINCT before they spill (default 1GB; each query's own budget is tessera.query_memory)")
	cmd.Flags().StringVar(&m.SpillDir, "spill-dir", "", "where queries spill past their memory budget (default: the system's temporary directory)")
	cmd.Flags().Var((*sizeFlag)(&m.SpillQuota), "spill-quota", "what the router's queries may have in spill files at once (default 16GB); past it a query fails with 53100")
}

// sizeFlag is a size in bytes written as Postgres writes memory settings
// (64MB, 1GB, 512kB).
type sizeFlag int64

func (s *sizeFlag) String() string {
	if *s == 0 {
		return ""
	}
	return router.FormatMemory(int64(*s))
}
func (s *sizeFlag) Type() string { return "size" }
func (s *sizeFlag) Set(v string) error {
	n, err := router.ParseMemory(v)
	if err == nil && n == 0 {
		err = fmt.Errorf("%q: a size must be more than 0", v)
	}
	*s = sizeFlag(n)
	return err
}

// negatedBool is a flag whose value is the opposite of the field it sets,
// so that a Config's zero value is the default.
type negatedBool bool

func (b *negatedBool) String() string { return strconv.FormatBool(!bool(*b)) }
func (b *negatedBool) Type() string   { return "bool" }
func (b *negatedBool) Set(s string) error {
	v, err := strconv.ParseBool(s)
	*b = negatedBool(!v)
	return err
}
