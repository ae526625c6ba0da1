package sidecar

import (
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tesseradb/tessera/topo/store"
)

// Config is a sidecar's configuration, validated once by New.
type Config struct {
	ShardUID   string
	InstanceID string
	Zone       string
	// ListenAddr is the gRPC listen address ("127.0.0.1:0" picks a port).
	ListenAddr string
	// AdvertiseAddr is the gRPC address published in the topology
	// service; empty means the address listened on.
	AdvertiseAddr string
	// SessionListenAddr, when set, is the framed session port (see
	// framed.go), the routers' fast path for query traffic; it is
	// published as the record's session address.
	SessionListenAddr string
	// SessionAdvertiseAddr is the session address published in the
	// topology service; empty means the address listened on.
	SessionAdvertiseAddr string
	// SessionSocket, when set with SessionListenAddr, is a unix socket
	// path where the framed session port also listens (mode 0600), for
	// routers on this machine; it is published as the record's session
	// socket.
	SessionSocket string
	// PostgresAddr is the instance's host:port for replication, published
	// in the topology service.
	PostgresAddr string
	// Secret is the cluster credential every caller must present.
	Secret string
	// TLSCertFile and TLSKeyFile, when set, make the gRPC port speak TLS.
	TLSCertFile, TLSKeyFile string
	// TLSClientCAFile, with TLS on, makes both ports require a client
	// certificate this CA signed (routers' --sidecar-cert), on top of the
	// cluster secret.
	TLSClientCAFile string

	Pool PoolConfig
	// HealthInterval is how often Postgres is checked; HeartbeatInterval
	// is the longest gap between health messages when nothing changes.
	HealthInterval, HeartbeatInterval time.Duration
	// LowDiskBytes: below this much free disk the instance refuses writes.
	LowDiskBytes uint64

	// Manager owns the Postgres instance.
	Manager Manager
	// Store, when set, is where the sidecar registers itself.
	Store           *store.Store
	RegistrationTTL time.Duration
	// IsolationFence, when set (it needs a Store), closes the gate to
	// client batches while the topology service has not answered a
	// quorum read of the shard's state for this long (isolation.go). It
	// must be at least MinIsolationFence, and shorter than the admin's
	// detection window. 0 turns it off.
	IsolationFence time.Duration

	Logger *slog.Logger
}

func (c *Config) withDefaults() Config {
	out := *c
	if out.Pool == (PoolConfig{}) {
		out.Pool = DefaultPoolConfig
	}
	if out.HealthInterval == 0 {
		out.HealthInterval = time.Second
	}
	if out.HeartbeatInterval == 0 {
		out.HeartbeatInterval = 2 * time.Second
	}
	if out.LowDiskBytes == 0 {
		out.LowDiskBytes = 256 << 20
	}
	if out.RegistrationTTL == 0 {
		out.RegistrationTTL = 10 * time.Second
	}
	if out.Logger == nil {
		out.Logger = slog.New(slog.DiscardHandler)
	}
	return out
}

func (c *Config) validate() error {
	var errs []error
	if c.ShardUID == "" {
		errs = append(errs, errors.New("shard uid is required"))
	}
	if c.InstanceID == "" {
		errs = append(errs, errors.New("instance id is required"))
	}
	if c.ListenAddr == "" {
		errs = append(errs, errors.New("listen address is required"))
	}
	if len(c.Secret) < 16 {
		errs = append(errs, errors.New("the cluster secret must be at least 16 characters"))
	}
	if (c.TLSCertFile == "") != (c.TLSKeyFile == "") {
		errs = append(errs, errors.New("TLS needs both a certificate and a key file"))
	}
	if c.TLSClientCAFile != "" && c.TLSCertFile == "" {
		errs = append(errs, errors.New("a client CA needs TLS on: a certificate and a key file"))
	}
	if c.Manager == nil {
		errs = append(errs, errors.New("a Postgres manager is required"))
	}
	switch {
	case c.IsolationFence < 0 || c.IsolationFence > 0 && c.IsolationFence < MinIsolationFence:
		errs = append(errs, fmt.Errorf("isolation fence %s: want 0 (off) or at least %s", c.IsolationFence, MinIsolationFence))
	case c.IsolationFence > 0 && c.Store == nil:
		errs = append(errs, errors.New("the isolation fence needs the topology service (a store)"))
	}
	p := c.Pool
	if p.Capacity < 1 || p.MinIdle < 0 || p.MinIdle > p.Capacity {
		errs = append(errs, fmt.Errorf("pool: capacity %d and min idle %d are out of range", p.Capacity, p.MinIdle))
	}
	if p.PipelineConns < 0 || p.PipelineConns > 0 && (p.PipelineSlowStatement <= 0 || p.PipelineStuckStatement <= 0) {
		errs = append(errs, fmt.Errorf("pool: %d pipelined connections (slow statement %s, stuck statement %s) is out of range",
			p.PipelineConns, p.PipelineSlowStatement, p.PipelineStuckStatement))
	}
	if p.MaxConnStatements < 0 {
		errs = append(errs, fmt.Errorf("pool: at most %d statements per connection is out of range", p.MaxConnStatements))
	}
	if p.MaxLifetime <= 0 || p.MaxWait <= 0 || p.IdleTimeout <= 0 || p.IdleInTransactionTimeout < 0 {
		errs = append(errs, errors.New("pool: lifetimes and timeouts must be positive"))
	}
	return errors.Join(errs...)
}
