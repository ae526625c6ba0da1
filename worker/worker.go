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

	"github.com/prometheus/client_golang/prometheus"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	tlog "go.temporal.io/sdk/log"
	sdkworker "go.temporal.io/sdk/worker"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/admin"
	"github.com/tesseradb/tessera/onlineddl"
	"github.com/tesseradb/tessera/replicator/actions"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
	"github.com/tesseradb/tessera/workflows/launch"
)

// Config configures a worker; Start validates it.
type Config struct {
	// TemporalAddr is the Temporal frontend's host:port.
	TemporalAddr string
	// Namespace is the Temporal namespace (default "default").
	Namespace string
	// EtcdEndpoints and Cluster locate the topology service; Etcd
	// secures the connection (TLS, credentials).
	EtcdEndpoints []string
	Cluster       string
	Etcd          store.DialOptions
	// TemporalTLS, when set, is used to reach Temporal.
	TemporalTLS *tls.Config
	// Secret is the cluster credential sidecars require; TLS, when set,
	// is used to reach them.
	Secret string
	TLS    *tls.Config
	// ID names the worker in discovery and the admin election; default
	// host-pid.
	ID string
	// Admin runs an admin beside the worker; AdminConfig tunes it (its
	// Store, Secret, TLS, Starter, ID and Logger are the worker's).
	Admin       bool
	AdminConfig admin.Config
	Logger      *slog.Logger
	// ReplicatorUser and ReplicatorPasswordFile are the Postgres
	// credentials the Replicator's activities (Reshard) and OnlineDDL's connect to shard
	// primaries with, directly: replication needs it. The password is read
	// from the file at each connection, never passed on a command line.
	// Without a file, Reshard and OnlineDDL fail at their first step (SQLSTATE F0000).
	ReplicatorUser         string
	ReplicatorPasswordFile string
	// Interceptors wrap the Temporal worker's workflow and activity
	// calls (tracing; the e2e tests stop a worker inside a given step).
	Interceptors []interceptor.WorkerInterceptor
	// Metrics, when set, gets the Temporal SDK's metrics: workflow and
	// activity durations, task latencies, failures (metrics.go).
	Metrics prometheus.Registerer
}

// A worker that dies must cost a cutover little: routers hold the moving
// tables' statements at most 10 s (their buffer window), and a cutover
// step whose worker died is retried after its heartbeat timeout (3 s).
const (
	// stickyTimeout: the workflow task that follows, queued for the dead
	// worker that held the workflow's state, moves to any worker after
	// this long rather than the SDK's 5 s. A live worker takes its
	// sticky tasks at once; one too busy for 2 s costs a history replay.
	stickyTimeout = 2 * time.Second
	// heartbeatEvery: heartbeats reach the server at least this often,
	// not only every 0.8 heartbeat timeouts (the SDK's throttle), which
	// would leave a 3 s timeout 0.6 s of slack on a loaded machine.
	heartbeatEvery = time.Second
)

// workerOptions are the Temporal worker's options, for a worker or a
// Replicator.
func workerOptions(interceptors []interceptor.WorkerInterceptor) sdkworker.Options {
	return sdkworker.Options{Interceptors: interceptors, StickyScheduleToStartTimeout: stickyTimeout, MaxHeartbeatThrottleInterval: heartbeatEvery}
}

// registrationTTL: how long a dead worker's record outlives it.
const registrationTTL = 10 * time.Second

func (c Config) withDefaults() (Config, error) {
	if c.Namespace == "" {
		c.Namespace = "default"
	}
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if c.TemporalAddr == "" {
		errs = append(errs, errors.New("worker: the Temporal address is required"))
	}
	if len(c.EtcdEndpoints) == 0 {
		errs = append(errs, errors.New("worker: etcd endpoints are required"))
	}
	if err := store.CheckCluster(c.Cluster); err != nil {
		errs = append(errs, fmt.Errorf("worker: %w", err))
	}
	if c.Secret == "" {
		errs = append(errs, errors.New("worker: the cluster secret is required"))
	}
	if strings.Contains(c.ID, "/") {
		errs = append(errs, fmt.Errorf("worker: id %q contains '/'", c.ID))
	}
	return c, errors.Join(errs...)
}

// Worker is a running worker.
type Worker struct {
	store    *store.Store
	temporal client.Client
	acts     *activities.Activities
	worker   sdkworker.Worker
	reg      *store.Registration
	cancel   context.CancelFunc
	adminErr chan error // nil without an admin
}

// Start connects to etcd and Temporal, starts polling the task queue,
// registers the worker in discovery and starts the admin if configured.
// On failure it stops what it started.
func Start(ctx context.Context, cfg Config) (_ *Worker, err error) {
	if cfg, err = cfg.withDefaults(); err != nil {
		return nil, err
	}
	log := cfg.Logger.With("worker", cfg.ID)
	w := &Worker{}
	defer func() {
		if err != nil {
			w.Stop(context.WithoutCancel(ctx))
		}
	}()
	if w.store, err = store.DialWith(ctx, cfg.EtcdEndpoints, cfg.Cluster, cfg.Etcd); err != nil {
		return nil, err
	}
	// Dial checks that the frontend answers, so a wrong address fails
	// here rather than on the first workflow.
	w.temporal, err = client.DialContext(ctx, client.Options{
		HostPort:          cfg.TemporalAddr,
		Namespace:         cfg.Namespace,
		Logger:            tlog.NewStructuredLogger(log),
		MetricsHandler:    metricsHandler(cfg.Metrics),
		ConnectionOptions: client.ConnectionOptions{TLS: cfg.TemporalTLS},
	})
	if err != nil {
		return nil, fmt.Errorf("connecting to Temporal at %s: %w", cfg.TemporalAddr, err)
	}
	if err := EnsureSearchAttributes(ctx, w.temporal, cfg.Namespace); err != nil {
		return nil, err
	}
	if w.acts, err = activities.New(activities.Config{Store: w.store, Secret: cfg.Secret, TLS: cfg.TLS, Logger: log}); err != nil {
		return nil, err
	}
	w.worker = sdkworker.New(w.temporal, workflows.TaskQueue, workerOptions(cfg.Interceptors))
	workflows.Register(w.worker, w.acts)
	replicatorActions(w.store, cfg).Register(w.worker)
	onlineDDLActivities(w.store, cfg).Register(w.worker)
	if err := w.worker.Start(); err != nil {
		w.worker = nil
		return nil, fmt.Errorf("starting the Temporal worker: %w", err)
	}
	// Atomic commits' recovery runs on a schedule (workflows/commitrecovery.go);
	// every worker makes sure it exists.
	if err := launch.EnsureCommitRecoverySchedule(ctx, w.temporal, workflows.TaskQueue); err != nil {
		return nil, fmt.Errorf("creating the commit recovery schedule: %w", err)
	}
	w.reg, err = w.store.Register(ctx, store.Record{Kind: store.KindWorker, ID: cfg.ID, Addr: cfg.TemporalAddr}, registrationTTL)
	if err != nil {
		return nil, err
	}
	if cfg.Admin {
		acfg := cfg.AdminConfig
		acfg.Store, acfg.Secret, acfg.TLS, acfg.ID, acfg.Logger = w.store, cfg.Secret, cfg.TLS, cfg.ID, log
		acfg.Starter = admin.NewTemporalStarter(w.temporal, w.store)
		a, err := admin.New(acfg)
		if err != nil {
			return nil, err
		}
		actx, cancel := context.WithCancel(context.WithoutCancel(ctx))
		w.cancel, w.adminErr = cancel, make(chan error, 1)
		go func() {
			err := a.Run(actx)
			if err != nil {
				log.Error("the admin stopped", "err", err)
			}
			w.adminErr <- err
		}()
	}
	log.Info("worker started", "temporal", cfg.TemporalAddr, "namespace", cfg.Namespace, "task_queue", workflows.TaskQueue, "admin", cfg.Admin)
	return w, nil
}

// Stop stops the admin (which resigns leadership), the Temporal worker,
// the registration and the connections. Activities still running are
// cancelled, not waited for (the SDK's WorkerStopTimeout is left at 0):
// Temporal runs them again on another worker, as after a crash, which
// every activity allows. It returns the admin's error, if it failed.
func (w *Worker) Stop(ctx context.Context) error {
	var err error
	if w.cancel != nil {
		w.cancel()
		err = <-w.adminErr
		w.cancel = nil
	}
	if w.worker != nil {
		w.worker.Stop()
		w.worker = nil
	}
	if w.reg != nil {
		w.reg.Close(ctx)
		w.reg = nil
	}
	if w.acts != nil {
		w.acts.Close()
		w.acts = nil
	}
	if w.temporal != nil {
		w.temporal.Close()
		w.temporal = nil
	}
	if w.store != nil {
		w.store.Close()
		w.store = nil
	}
	return err
}

// Run runs a worker until ctx ends.
func Run(ctx context.Context, cfg Config) error {
	w, err := Start(ctx, cfg)
	if err != nil {
		return err
	}
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	return w.Stop(sctx)
}

// replicatorActions are the Replicator's activities, reaching shard
// primaries at the addresses their sidecars publish.
func replicatorActions(st *store.Store, cfg Config) *actions.Actions {
	return &actions.Actions{Store: st, Conn: replicatorConnector(st, cfg)}
}

// onlineDDLActivities are OnlineDDL's and SchemaCheck's activities: they
// reach shard primaries as the Replicator does, with its credentials.
func onlineDDLActivities(st *store.Store, cfg Config) *onlineddl.Activities {
	return &onlineddl.Activities{Store: st, Conn: replicatorConnector(st, cfg)}
}

func replicatorConnector(st *store.Store, cfg Config) actions.DiscoveryConnector {
	user := cfg.ReplicatorUser
	if user == "" {
		user = "postgres"
	}
	return actions.DiscoveryConnector{Store: st, User: user, PasswordFile: cfg.ReplicatorPasswordFile}
}
