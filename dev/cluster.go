package dev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/tesseradb/tessera/router"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
	"github.com/tesseradb/tessera/worker"
	"github.com/tesseradb/tessera/workflows/launch"
)

// Cluster is a running dev cluster.
//
// Start starts everything and returns; the processes it owns (Postgres
// children, goroutines serving sidecars, etcd, Temporal) run until Stop,
// which stops them in reverse order and leaves nothing running.
type Cluster struct {
	cfg    Config
	log    *slog.Logger
	secret string

	etcd     *etcdembed.Server
	store    *store.Store
	temporal TemporalServer
	worker   *worker.Worker
	router   *router.Server
	// workerMetrics holds the worker's Temporal SDK metrics (metrics.go).
	workerMetrics *prometheus.Registry
	// onlineDDL starts the router's sessions' online migrations.
	onlineDDL *launch.RouterOnlineDDL

	mu     sync.Mutex // guards info, shards and replicators
	info   Info
	shards map[string]*shard
	// replicators run one per shard, on its own task queue.
	replicators map[string]*worker.Replicator

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start brings the cluster up, resuming the one in cfg.DataDir if there
// is one. On failure everything it started is stopped again.
func Start(ctx context.Context, cfg Config) (_ *Cluster, err error) {
	if cfg, err = cfg.withDefaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	// Postgres runs as an unprivileged user that must traverse the data
	// directory to reach its own.
	if err := os.Chmod(cfg.DataDir, 0o755); err != nil {
		return nil, err
	}
	c := &Cluster{cfg: cfg, log: cfg.Logger, shards: map[string]*shard{}, replicators: map[string]*worker.Replicator{},
		workerMetrics: prometheus.NewRegistry()}
	defer func() {
		if err != nil {
			c.Stop(context.WithoutCancel(ctx))
		}
	}()
	if prev, err := ReadInfo(cfg.DataDir); err == nil {
		c.info = *prev
	} else if !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	c.info.Cluster, c.info.DataDir = cfg.Cluster, cfg.DataDir
	c.info.SecretFile = filepath.Join(cfg.DataDir, "secret")
	if c.secret, err = ensureSecret(cfg.DataDir); err != nil {
		return nil, err
	}
	if err := c.startEtcd(ctx); err != nil {
		return nil, err
	}
	top, err := c.applyTopology(ctx)
	if err != nil {
		return nil, err
	}
	if err := c.startTemporal(ctx); err != nil {
		return nil, err
	}
	// Ports are handed out in shard order, then shards start side by
	// side: initdb and base backups dominate.
	toRun := c.shardsToRun(top)
	c.mu.Lock()
	for _, uid := range toRun {
		c.instanceInfos(uid, cfg.Replicas)
	}
	c.mu.Unlock()
	var wg sync.WaitGroup
	errs := make([]error, 0)
	var emu sync.Mutex
	for _, uid := range toRun {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := c.startShard(ctx, uid, cfg.Replicas); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := c.startRouter(ctx); err != nil {
		return nil, err
	}
	if err := c.startWorker(ctx); err != nil {
		return nil, err
	}
	for _, uid := range toRun {
		if err := c.startReplicator(ctx, uid); err != nil {
			return nil, err
		}
	}
	if err := c.save(); err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	c.cancel = cancel
	c.wg.Add(1)
	go func() { defer c.wg.Done(); c.serveShardRequests(runCtx) }()
	return c, nil
}

// Info returns where everything listens.
func (c *Cluster) Info() Info {
	c.mu.Lock()
	defer c.mu.Unlock()
	info := c.info
	info.Shards = append([]ShardInfo(nil), c.info.Shards...)
	return info
}

// Secret returns the cluster credential sidecars require.
func (c *Cluster) Secret() string { return c.secret }

// Store returns the topology service client.
func (c *Cluster) Store() *store.Store { return c.store }

// Stop stops everything Start started. It is safe to call more than once.
func (c *Cluster) Stop(ctx context.Context) error {
	if c.cancel != nil {
		c.cancel()
	}
	c.wg.Wait()
	c.stopReplicators(ctx)
	var errs []error
	// The worker's admin goes first: it would take stopping shards for
	// failed ones.
	if c.worker != nil {
		if err := c.worker.Stop(ctx); err != nil {
			errs = append(errs, fmt.Errorf("stopping the worker: %w", err))
		}
		c.worker = nil
	}
	if c.router != nil {
		c.router.Stop(ctx)
		c.router = nil
	}
	if c.onlineDDL != nil {
		c.onlineDDL.Close()
		c.onlineDDL = nil
	}
	c.mu.Lock()
	shards := c.shards
	c.shards = map[string]*shard{}
	c.mu.Unlock()
	var wg sync.WaitGroup
	var emu sync.Mutex
	for _, sh := range shards {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := sh.stop(ctx); err != nil {
				emu.Lock()
				errs = append(errs, err)
				emu.Unlock()
			}
		}()
	}
	wg.Wait()
	if c.temporal != nil {
		if err := c.temporal.Stop(); err != nil {
			errs = append(errs, fmt.Errorf("stopping temporal: %w", err))
		}
		c.temporal = nil
	}
	if c.store != nil {
		c.store.Close()
		c.store = nil
	}
	if c.etcd != nil {
		c.etcd.Stop()
		c.etcd = nil
	}
	return errors.Join(errs...)
}

func (c *Cluster) startEtcd(ctx context.Context) error {
	addr := ""
	if len(c.info.Etcd) > 0 {
		addr = trimScheme(c.info.Etcd[0])
	} else {
		addr = freeOr("127.0.0.1", max(c.cfg.EtcdPort, 0))
	}
	srv, err := etcdembed.Run(etcdembed.Options{Dir: filepath.Join(c.cfg.DataDir, "etcd"), ClientAddr: addr})
	if err != nil {
		return err
	}
	c.etcd = srv
	c.info.Etcd = srv.Endpoints
	c.store, err = store.Dial(ctx, srv.Endpoints, c.cfg.Cluster)
	return err
}

// applyTopology stores the topology file, or the default topology when
// none is stored, and returns what is stored.
func (c *Cluster) applyTopology(ctx context.Context) (*topo.Topology, error) {
	var want *topo.Topology
	if c.cfg.TopologyFile != "" {
		doc, err := os.ReadFile(c.cfg.TopologyFile)
		if err != nil {
			return nil, err
		}
		if want, err = topo.Parse(doc); err != nil {
			return nil, fmt.Errorf("%s: %w", c.cfg.TopologyFile, err)
		}
	} else {
		snap, err := c.store.GetTopology(ctx)
		if err == nil {
			return snap.Topology, nil
		}
		if !errors.Is(err, store.ErrNoTopology) {
			return nil, err
		}
		want = defaultTopology()
	}
	if _, err := c.store.ApplyTopology(ctx, want, store.ApplyOptions{ExpectedRevision: store.AnyRevision}); err != nil {
		return nil, err
	}
	return want, nil
}

// defaultTopology keeps every table in the authoritative group on shard-0.
func defaultTopology() *topo.Topology {
	t, err := topo.Parse([]byte(`{"authoritative_shard_group": "main",
	  "shard_groups": [{"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]}]}`))
	if err != nil {
		panic(err)
	}
	return t
}

// startRouter starts the router on RouterPort, with SSL from a
// self-signed certificate.
func (c *Cluster) startRouter(ctx context.Context) error {
	if c.cfg.NoRouter {
		return nil
	}
	cert, key, err := ensureCertificate(c.cfg.DataDir)
	if err != nil {
		return err
	}
	cfg := router.Config{
		ListenAddr:  net.JoinHostPort("127.0.0.1", strconv.Itoa(max(c.cfg.RouterPort, 0))),
		Store:       c.store,
		Secret:      c.secret,
		TLSCertFile: cert,
		TLSKeyFile:  key,
		Logger:      c.log,
		// The sidecars run in this process.
		InProcessSidecars: !c.cfg.RouterOverSockets,
		NoAutoPrepare:     c.cfg.NoAutoPrepare,
		Commit:            c.cfg.Commit,
		Memory:            c.cfg.RouterMemory,
	}
	if c.temporal != nil {
		// Sessions' tessera.ddl_strategy starts migrations on the
		// embedded Temporal, whose worker runs them.
		c.onlineDDL = &launch.RouterOnlineDDL{Addr: c.temporal.FrontendAddr()}
		cfg.OnlineDDL = c.onlineDDL
		cfg.CommitRecovery = c.onlineDDL.StartCommitRecovery
	}
	r, err := router.New(cfg)
	if err != nil {
		return err
	}
	if err := r.Start(ctx); err != nil {
		return fmt.Errorf("starting the router: %w", err)
	}
	c.router = r
	c.info.Router = r.Addr()
	return nil
}

func (c *Cluster) startTemporal(ctx context.Context) error {
	if c.cfg.Temporal == nil {
		return nil
	}
	srv, err := c.cfg.Temporal(ctx, filepath.Join(c.cfg.DataDir, "temporal.db"), c.cfg.TemporalPort, c.cfg.TemporalUIPort, c.log)
	if err != nil {
		return fmt.Errorf("starting temporal: %w", err)
	}
	c.temporal = srv
	c.info.Temporal, c.info.TemporalUI = srv.FrontendAddr(), srv.UIURL()
	return nil
}

// startWorker runs a Temporal worker with an admin against the embedded
// server, once the shards are up (an admin watching shards being created
// would only see half-made ones).
func (c *Cluster) startWorker(ctx context.Context) error {
	if c.temporal == nil {
		return nil
	}
	wcfg := worker.Config{
		TemporalAddr:  c.temporal.FrontendAddr(),
		EtcdEndpoints: c.info.Etcd,
		Cluster:       c.cfg.Cluster,
		Secret:        c.secret,
		ID:            "dev",
		Admin:         true,
		Logger:        c.log,
		Metrics:       c.workerMetrics,
	}
	// The Replicator's activities (Reshard) connect to the primaries
	// directly, as the superuser, with the password from this file.
	wcfg.ReplicatorPasswordFile = c.replicatorPasswordFile()
	if err := os.WriteFile(wcfg.ReplicatorPasswordFile, []byte(c.cfg.Password), 0o600); err != nil {
		return err
	}
	w, err := worker.Start(ctx, wcfg)
	if err != nil {
		return fmt.Errorf("starting the worker: %w", err)
	}
	c.worker = w
	return nil
}

// shardsToRun lists shard-0 ... shard-{N-1}, the shards the topology
// names and those created earlier, in order.
func (c *Cluster) shardsToRun(top *topo.Topology) []string {
	seen := map[string]bool{}
	var out []string
	add := func(uid string) {
		if !seen[uid] {
			seen[uid] = true
			out = append(out, uid)
		}
	}
	for i := 0; i < c.cfg.Shards; i++ {
		add("shard-" + strconv.Itoa(i))
	}
	for _, uid := range top.Shards() {
		add(uid)
	}
	for _, s := range c.info.Shards {
		add(s.UID)
	}
	return out
}

func (c *Cluster) known(uid string) *ShardInfo {
	for i := range c.info.Shards {
		if c.info.Shards[i].UID == uid {
			return &c.info.Shards[i]
		}
	}
	return nil
}

func (c *Cluster) save() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i := range c.info.Shards {
		if sh := c.shards[c.info.Shards[i].UID]; sh != nil {
			c.info.Shards[i] = sh.info()
		}
	}
	return writeInfo(c.cfg.DataDir, &c.info)
}

// freeOr returns host:port if the port is free, else host:0 so that the
// kernel picks one.
func freeOr(host string, port int) string {
	addr := net.JoinHostPort(host, strconv.Itoa(port))
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return net.JoinHostPort(host, "0")
	}
	l.Close()
	return addr
}

// portFree reports whether a TCP port on 127.0.0.1 can be listened on.
func portFree(port int) bool {
	l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return false
	}
	l.Close()
	return true
}

func trimScheme(endpoint string) string {
	for _, p := range []string{"http://", "https://"} {
		if len(endpoint) > len(p) && endpoint[:len(p)] == p {
			return endpoint[len(p):]
		}
	}
	return endpoint
}
