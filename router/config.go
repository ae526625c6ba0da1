package router

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tesseradb/tessera/topo/store"
)

// Config is a router's configuration, validated once by New.
type Config struct {
	// ListenAddr is where clients connect ("127.0.0.1:6432").
	ListenAddr string
	// Store is the topology service: the topology and the sidecars.
	Store *store.Store
	// Secret is the cluster credential the sidecars require.
	Secret string
	// SidecarTLS, when set, is used to reach sidecars.
	SidecarTLS *tls.Config
	// TLSCertFile and TLSKeyFile, when set, let clients use SSL.
	TLSCertFile, TLSKeyFile string
	// AdminUser and AdminDatabase are what the router uses for its own
	// queries on the authoritative shard (roles, catalog).
	AdminUser, AdminDatabase string
	// MaxMessageSize bounds one client message once it has logged in
	// (before, Postgres's limits apply: startup.go).
	MaxMessageSize int
	// AuthTimeout is Postgres's authentication_timeout: how long a
	// client has from connecting to logging in (default 1 minute).
	AuthTimeout time.Duration
	// MaxConnections is Postgres's max_connections, counted on this
	// router: client connections, logged in or not, beyond which a new
	// one is refused (53300; default 10000).
	MaxConnections int
	// HBAFile, when set, is a file of host-based rules, a subset of
	// pg_hba.conf (hba.go), read and checked by New; without it every
	// client may try its password.
	HBAFile string
	// RoleCacheTTL is how long fetched roles are trusted before a refresh.
	RoleCacheTTL time.Duration
	// PlanCacheSize is how many statement plans are kept.
	PlanCacheSize int
	// QueryStatsSize bounds how many normalized statements
	// tessera.query_stats keeps (default 5000).
	QueryStatsSize int
	// InProcessSidecars lets sessions on a sidecar that runs in this
	// process (tessera dev) go by function call instead of its socket:
	// one hop, as PgBouncer is.
	InProcessSidecars bool
	// NoAutoPrepare makes tessera.auto_prepare off by default: simple-
	// protocol reads run as written unless a session sets it on
	// (autoprepare.go).
	NoAutoPrepare bool
	// Commit is tessera.commit's default for sessions that do not set
	// it: "atomic" (two-phase commit across shards; the default when
	// empty) or "best_effort" (atomic.go). Give every router of a cluster
	// the same value: it is the cluster's default.
	Commit string
	// OnlineDDL, when set, starts the OnlineDDL migrations that sessions
	// ask for with tessera.ddl_strategy (ddlstrategy.go); without it
	// those sessions' schema changes are refused.
	OnlineDDL OnlineDDL
	// CommitRecovery, when set, asks the control plane to resolve the
	// prepared transactions of atomic commits now (the router lost a
	// participant mid-commit; atomic.go). Without it the scheduled
	// recovery does, later.
	CommitRecovery func(context.Context) error
	// SequenceBlock is how many values of a sequence that feeds tables
	// beyond the authoritative shard the router reserves at a time
	// (sequence.go; default 1000, at most 1000000).
	SequenceBlock int
	// Buffer bounds query buffering during primary changes (buffer.go).
	Buffer BufferConfig
	// Memory bounds what the router's queries hold and spill (memory.go).
	Memory MemoryConfig
	Logger *slog.Logger
}

func (c Config) withDefaults() Config {
	if c.AdminUser == "" {
		c.AdminUser = "postgres"
	}
	if c.AdminDatabase == "" {
		c.AdminDatabase = "postgres"
	}
	if c.MaxMessageSize == 0 {
		c.MaxMessageSize = 256 << 20
	}
	if c.AuthTimeout == 0 {
		c.AuthTimeout = time.Minute
	}
	if c.MaxConnections == 0 {
		c.MaxConnections = 10000
	}
	if c.RoleCacheTTL == 0 {
		c.RoleCacheTTL = 5 * time.Second
	}
	if c.PlanCacheSize == 0 {
		c.PlanCacheSize = 10000
	}
	if c.QueryStatsSize == 0 {
		c.QueryStatsSize = 5000
	}
	if c.SequenceBlock == 0 {
		c.SequenceBlock = DefaultSequenceBlock
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	c.Buffer = c.Buffer.withDefaults()
	c.Memory = c.Memory.withDefaults()
	return c
}

func (c Config) validate() error {
	var errs []error
	if c.ListenAddr == "" {
		errs = append(errs, errors.New("a listen address is required"))
	}
	if c.Store == nil {
		errs = append(errs, errors.New("the topology service is required"))
	}
	if c.Secret == "" {
		errs = append(errs, errors.New("the cluster secret is required"))
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("TLS needs both a certificate and a key file"))
	}
	if c.MaxMessageSize < 1<<16 {
		errs = append(errs, errors.New("the message size limit must be at least 64 KiB"))
	}
	if c.AuthTimeout < time.Second || c.AuthTimeout > 10*time.Minute {
		// Postgres's bounds for authentication_timeout.
		errs = append(errs, errors.New("the authentication timeout must be between 1s and 10m"))
	}
	if c.Commit != "" && c.Commit != commitAtomic && c.Commit != commitBestEffort {
		errs = append(errs, fmt.Errorf("the default commit mode must be %s or %s, not %q", commitAtomic, commitBestEffort, c.Commit))
	}
	if c.MaxConnections < 1 {
		errs = append(errs, errors.New("the connection limit must be at least 1"))
	}
	if c.SequenceBlock < 1 || c.SequenceBlock > maxSequenceBlock {
		errs = append(errs, fmt.Errorf("the sequence block must be between 1 and %d values", maxSequenceBlock))
	}
	if err := c.Buffer.validate(); err != nil {
		errs = append(errs, err)
	}
	if err := c.Memory.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}
