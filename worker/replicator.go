package worker

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/tesseradb/tessera/replicator/actions"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// ReplicatorConfig configures a Replicator beside one shard's primary
// (`tessera replicator --shard`); StartReplicator validates it.
type ReplicatorConfig struct {
	// TemporalAddr is the Temporal frontend's host:port.
	TemporalAddr string
	// Namespace is the Temporal namespace (default "default").
	Namespace string
	// EtcdEndpoints and Cluster locate the topology service; Etcd and
	// TemporalTLS secure the connections, as the worker's.
	EtcdEndpoints []string
	Cluster       string
	Etcd          store.DialOptions
	TemporalTLS   *tls.Config
	// Shard is the shard whose copies and streams it runs, on task queue
	// workflows.ReplicatorQueue(Shard).
	Shard string
	// ID names it in discovery; default <shard>-host-pid.
	ID     string
	Logger *slog.Logger
	// ReplicatorUser and ReplicatorPasswordFile: the Postgres credentials
	// it reaches the shard's primary (and the targets) with, as the
	// worker's. The password is read from the file at each connection.
	ReplicatorUser         string
	ReplicatorPasswordFile string
	// Conn, when set, replaces the connector those credentials make:
	// tests reach shards that have no sidecar.
	Conn actions.Connector
	// Interceptors: as Config's.
	Interceptors []interceptor.WorkerInterceptor
}

func (c ReplicatorConfig) withDefaults() (ReplicatorConfig, error) {
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%s-%d", c.Shard, host, os.Getpid())
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	if c.ReplicatorUser == "" {
		c.ReplicatorUser = "postgres"
	}
	var errs []error
	if c.TemporalAddr == "" {
		errs = append(errs, errors.New("replicator: the Temporal address is required"))
	}
	if len(c.EtcdEndpoints) == 0 {
		errs = append(errs, errors.New("replicator: etcd endpoints are required"))
	}
	if err := store.CheckCluster(c.Cluster); err != nil {
		errs = append(errs, fmt.Errorf("replicator: %w", err))
	}
	if c.Shard == "" {
		errs = append(errs, errors.New("replicator: the shard is required"))
	}
	if strings.Contains(c.ID, "/") {
		errs = append(errs, fmt.Errorf("replicator: id %q contains '/'", c.ID))
	}
	if c.Conn == nil {
		// Checked now rather than at the first copy: without it the
		// replicator takes tasks it can only fail.
		if c.ReplicatorPasswordFile == "" {
			errs = append(errs, errors.New("replicator: a password file is required (--replicator-password-file)"))
		} else if _, err := os.ReadFile(c.ReplicatorPasswordFile); err != nil {
			errs = append(errs, fmt.Errorf("replicator: reading the password file: %w", err))
		}
	}
	return c, errors.Join(errs...)
}

// Replicator is a running Replicator: a Temporal worker polling its
// shard's queue, registered in discovery.
type Replicator struct {
	store    *store.Store
	temporal client.Client
	worker   sdkworker.Worker
	reg      *store.Registration
}

// StartReplicator connects to etcd and Temporal, starts polling the
// shard's task queue and only then registers in discovery, so that a plan
// routes nothing to a queue nobody polls. On failure it stops what it
// started.
func StartReplicator(ctx context.Context, cfg ReplicatorConfig) (_ *Replicator, err error) {
	if cfg, err = cfg.withDefaults(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("replicator", cfg.ID, "shard", cfg.Shard)
	r := &Replicator{}
	defer func() {
		if err != nil {
			r.Stop(context.WithoutCancel(ctx))
		}
	}()
	if r.store, err = store.DialWith(ctx, cfg.EtcdEndpoints, cfg.Cluster, cfg.Etcd); err != nil {
		return nil, err
	}
	r.temporal, err = client.DialContext(ctx, client.Options{
		HostPort:          cfg.TemporalAddr,
		Namespace:         cfg.Namespace,
		Logger:            tlog.NewStructuredLogger(log),
		ConnectionOptions: client.ConnectionOptions{TLS: cfg.TemporalTLS},
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to Temporal at %s: %w", cfg.TemporalAddr, err)
	}
	conn := cfg.Conn
	if conn == nil {
		conn = actions.DiscoveryConnector{Store: r.store, User: cfg.ReplicatorUser, PasswordFile: cfg.ReplicatorPasswordFile}
	}
	queue := workflows.ReplicatorQueue(cfg.Shard)
	r.worker = sdkworker.New(r.temporal, queue, workerOptions(cfg.Interceptors))
	(&actions.Actions{Store: r.store, Conn: conn}).RegisterSource(r.worker, cfg.Shard)
	if err := r.worker.Start(); err != nil {
		r.worker = nil
		return nil, fmt.Errorf("starting the Temporal worker: %w", err)
	}
	r.reg, err = r.store.Register(ctx, store.Record{Kind: store.KindReplicator, ID: cfg.ID, ShardUID: cfg.Shard, Addr: cfg.TemporalAddr}, registrationTTL)
	if err != nil {
		return nil, err
	}
	log.Info("replicator started", "temporal", cfg.TemporalAddr, "namespace", cfg.Namespace, "task_queue", queue)
	return r, nil
}

// Stop stops polling (running copies and streams are cancelled; the
// workflow retries them from their heartbeats once a replicator of the
// shard polls again), then the registration and the connections.
func (r *Replicator) Stop(ctx context.Context) {
	if r.worker != nil {
		r.worker.Stop()
		r.worker = nil
	}
	if r.reg != nil {
		r.reg.Close(ctx)
		r.reg = nil
	}
	if r.temporal != nil {
		r.temporal.Close()
		r.temporal = nil
	}
	if r.store != nil {
		r.store.Close()
		r.store = nil
	}
}

// RunReplicator runs a Replicator until ctx ends.
func RunReplicator(ctx context.Context, cfg ReplicatorConfig) error {
	r, err := StartReplicator(ctx, cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	r.Stop(sctx)
	return nil
}
