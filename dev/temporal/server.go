package temporal

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/server/common/cluster"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/dynamicconfig"
	"go.temporal.io/server/common/membership/static"
	sqliteplugin "go.temporal.io/server/common/persistence/sql/sqlplugin/sqlite"
	"go.temporal.io/server/common/primitives"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	temporalserver "go.temporal.io/server/temporal"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// Default ports, those of `temporal server start-dev`: the frontend's gRPC
// API on 7233 and the Web UI on http://127.0.0.1:8233.
const (
	DefaultFrontendPort = 7233
	DefaultUIPort       = 8233
)

// DefaultStartTimeout bounds Start when its context has no deadline.
const DefaultStartTimeout = time.Minute

// clusterName is the name of the single Temporal cluster a Server runs.
const clusterName = "active"

// loopback is where the internal services (history, matching, worker)
// listen, whatever Config.Host is: nothing outside the process needs them.
const loopback = "127.0.0.1"

// Config says how to run an embedded Temporal server. The zero value runs one
// like `temporal server start-dev`: in memory, frontend on 127.0.0.1:7233,
// UI on http://127.0.0.1:8233, namespace "default", logging only errors.
type Config struct {
	// DBFile is the SQLite file that holds the server's state. It is created,
	// with its schema, if it does not exist; its directory must. Starting
	// again on the same file resumes every workflow where it was: `tessera
	// dev` passes <data dir>/temporal.db. "" keeps the state in memory, lost
	// when the server stops.
	DBFile string

	// Host is the IP address the frontend and the UI listen on; default
	// 127.0.0.1. An unspecified address (0.0.0.0, ::) listens on every
	// interface; FrontendAddr and UIURL then name the loopback address.
	Host string

	// FrontendPort is the frontend's gRPC port: 0 means DefaultFrontendPort,
	// a negative value a free port picked by Start (for tests, so that
	// servers started in parallel never collide).
	FrontendPort int

	// UIPort is the Web UI's HTTP port: 0 means DefaultUIPort, a negative
	// value a free port picked by Start. Ignored when DisableUI is set.
	UIPort int

	// DisableUI runs the server without its Web UI.
	DisableUI bool

	// Namespaces are created, if they do not exist yet, before the server
	// starts, so they are usable as soon as Start returns. Default
	// ["default"]. The first is the one the UI opens.
	Namespaces []string

	// SearchAttributes are the custom search attributes (name and type)
	// every namespace is created with, e.g. Tessera's TesseraPhase
	// (workflows.SearchAttributes). A namespace that already exists in
	// DBFile keeps those it has; Tessera's workers add theirs if missing.
	SearchAttributes map[string]enumspb.IndexedValueType

	// Logger receives the server's logs. Temporal logs a great deal at
	// Info and Debug; whether a record is written is for the logger's
	// handler to decide. nil writes only errors, to standard error.
	Logger *slog.Logger
}

// Server is a running embedded Temporal server and its Web UI.
type Server struct {
	frontendAddr string
	uiURL        string

	server temporalserver.Server
	ui     *uiServer
	picked []int // ports on loopback to release on Stop

	stopOnce sync.Once
	stopErr  error
}

// Start runs a Temporal server, and its Web UI unless disabled, in this
// process. It returns once the frontend answers requests for every
// namespace in cfg.Namespaces and the UI answers HTTP; ctx bounds that wait
// (DefaultStartTimeout if it has no deadline) but not the server's life,
// which lasts until Stop.
func Start(ctx context.Context, cfg Config) (*Server, error) {
	if err := cfg.fill(); err != nil {
		return nil, err
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultStartTimeout)
		defer cancel()
	}
	// A port picked free may be taken before the server binds it (by an
	// outgoing connection's ephemeral port, say): the start is tried
	// again with new ports.
	for attempt := 1; ; attempt++ {
		srv, err := start(ctx, cfg)
		if err == nil || attempt == 3 || !errors.Is(err, errPortTaken) {
			return srv, err
		}
	}
}

// errPortTaken marks a start that failed because a port it had picked
// was taken meanwhile.
var errPortTaken = errors.New("a picked port was taken before the server bound it")

func start(ctx context.Context, cfg Config) (srv *Server, err error) {

	s := &Server{}
	// Until Start succeeds, undo whatever has been done.
	var uiListener net.Listener
	defer func() {
		if err == nil {
			return
		}
		if uiListener != nil && s.ui == nil {
			uiListener.Close()
		}
		s.Stop()
	}()

	// Ports. The frontend binds cfg.Host; other processes reach it, and the
	// UI, through dialHost.
	dialHost := cfg.Host
	if ip := net.ParseIP(cfg.Host); ip.IsUnspecified() {
		dialHost = loopback
		if ip.To4() == nil {
			dialHost = "::1"
		}
	}
	frontendPort := cfg.FrontendPort
	if frontendPort < 0 {
		// Picked on loopback, where the internal services' ports are
		// picked too, so that one reservation covers them all.
		if frontendPort, err = s.pick(); err != nil {
			return nil, err
		}
		if cfg.Host != loopback {
			if err := checkPortFree(cfg.Host, frontendPort); err != nil {
				return nil, fmt.Errorf("temporal frontend: %w", err)
			}
		}
	} else if err := checkPortFree(cfg.Host, frontendPort); err != nil {
		return nil, fmt.Errorf("temporal frontend: %w", err)
	}
	s.frontendAddr = net.JoinHostPort(dialHost, strconv.Itoa(frontendPort))
	ports := map[primitives.ServiceName]int{primitives.FrontendService: frontendPort}
	for _, svc := range []primitives.ServiceName{primitives.HistoryService, primitives.MatchingService, primitives.WorkerService} {
		if ports[svc], err = s.pick(); err != nil {
			return nil, err
		}
	}
	if !cfg.DisableUI {
		// Bound now and held until the UI serves on it, so a picked port
		// cannot be taken meanwhile.
		port := max(cfg.UIPort, 0) // a negative port: the kernel picks
		if uiListener, err = net.Listen("tcp", net.JoinHostPort(cfg.Host, strconv.Itoa(port))); err != nil {
			return nil, fmt.Errorf("temporal ui: %w", err)
		}
		port = uiListener.Addr().(*net.TCPAddr).Port
		s.uiURL = "http://" + net.JoinHostPort(dialHost, strconv.Itoa(port))
	}

	// Persistence, and the namespaces, before the server starts: a namespace
	// registered through the API would not be usable until the frontend's
	// namespace cache refreshes.
	sqlCfg, err := prepareSQLite(cfg.DBFile, cfg.Namespaces, cfg.SearchAttributes)
	if err != nil {
		return nil, err
	}

	logger := slogAdapter{l: cfg.Logger}
	hosts := make(map[primitives.ServiceName]static.Hosts, len(ports))
	for svc, port := range ports {
		host := loopback
		if svc == primitives.FrontendService {
			host = dialHost
		}
		hosts[svc] = static.SingleLocalHost(net.JoinHostPort(host, strconv.Itoa(port)))
	}
	opts := []temporalserver.ServerOption{
		temporalserver.WithConfig(serverConfig(cfg.Host, s.frontendAddr, ports, sqlCfg)),
		temporalserver.ForServices(temporalserver.DefaultServices),
		temporalserver.WithStaticHosts(hosts),
		temporalserver.WithLogger(logger),
		temporalserver.WithDynamicConfigClient(dynamicconfig.StaticClient{
			// Those of `temporal server start-dev`: a mutable-state cache
			// of 8k entries and more visibility queries per second (the
			// UI lists workflows often).
			dynamicconfig.HistoryCacheHostLevelMaxSize.Key():                 8096,
			dynamicconfig.FrontendMaxNamespaceVisibilityRPSPerInstance.Key(): 100,
		}),
	}
	if err := recoverFatal(func() error {
		var err error
		if s.server, err = temporalserver.NewServer(opts...); err != nil {
			return err
		}
		return s.server.Start()
	}); err != nil {
		if strings.Contains(err.Error(), "address already in use") {
			return nil, fmt.Errorf("starting temporal server: %w (%w)", err, errPortTaken)
		}
		return nil, fmt.Errorf("starting temporal server: %w", err)
	}

	if uiListener != nil {
		if s.ui, err = startUI(uiListener, s.frontendAddr, cfg.Namespaces[0], cfg.Logger); err != nil {
			return nil, err
		}
	}

	if err := waitFrontend(ctx, s.frontendAddr, cfg.Namespaces); err != nil {
		return nil, err
	}
	if s.ui != nil {
		if err := waitHTTP(ctx, s.uiURL+"/"); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// FrontendAddr is the host:port of the frontend's gRPC API, the address to
// give SDK clients and workers, e.g. "127.0.0.1:7233".
func (s *Server) FrontendAddr() string { return s.frontendAddr }

// UIURL is the Web UI's address, e.g. "http://127.0.0.1:8233", or "" when
// the UI is disabled.
func (s *Server) UIURL() string { return s.uiURL }

// Stop stops the UI and the server and releases their ports. It is safe to
// call more than once, and from several goroutines; every call returns the
// first call's result.
//
// The Temporal server never closes its SQLite connections (they are pooled
// for the life of the process), so an in-memory database's memory, or a
// file's descriptor, is only released when the process exits. Starting
// again on the same DBFile in the same process works.
func (s *Server) Stop() error {
	s.stopOnce.Do(func() {
		var errs []error
		if s.ui != nil {
			if err := s.ui.stop(); err != nil {
				errs = append(errs, fmt.Errorf("stopping temporal ui: %w", err))
			}
		}
		if s.server != nil {
			if err := recoverFatal(s.server.Stop); err != nil {
				errs = append(errs, fmt.Errorf("stopping temporal server: %w", err))
			}
		}
		for _, port := range s.picked {
			releasePort(loopback, port)
		}
		s.stopErr = errors.Join(errs...)
	})
	return s.stopErr
}

// pick picks a free port on loopback and remembers to release it on Stop.
func (s *Server) pick() (int, error) {
	port, err := pickPort(loopback)
	if err != nil {
		return 0, err
	}
	s.picked = append(s.picked, port)
	return port, nil
}

// fill applies the defaults and checks what cannot be used.
func (c *Config) fill() error {
	if c.Host == "" {
		c.Host = loopback
	}
	if net.ParseIP(c.Host) == nil {
		return fmt.Errorf("temporal: host %q is not an IP address", c.Host)
	}
	if c.FrontendPort == 0 {
		c.FrontendPort = DefaultFrontendPort
	}
	if c.UIPort == 0 {
		c.UIPort = DefaultUIPort
	}
	if c.FrontendPort > 65535 || c.UIPort > 65535 {
		return fmt.Errorf("temporal: port out of range")
	}
	if len(c.Namespaces) == 0 {
		c.Namespaces = []string{"default"}
	} else {
		c.Namespaces = slices.Clone(c.Namespaces)
	}
	for _, ns := range c.Namespaces {
		if ns == "" {
			return fmt.Errorf("temporal: empty namespace name")
		}
	}
	if c.Logger == nil {
		c.Logger = quietLogger()
	}
	if c.DBFile != "" {
		// SQLite opens it as a URI (file:PATH?mode=rwc).
		if strings.ContainsAny(c.DBFile, "?#") {
			return fmt.Errorf("temporal: database file %q: '?' and '#' are not allowed", c.DBFile)
		}
		abs, err := filepath.Abs(c.DBFile)
		if err != nil {
			return fmt.Errorf("temporal: database file: %w", err)
		}
		c.DBFile = abs
	}
	return nil
}

// prepareSQLite returns the persistence config for dbFile ("" for memory),
// with its schema set up and the namespaces created.
func prepareSQLite(dbFile string, namespaces []string, searchAttributes map[string]enumspb.IndexedValueType) (*config.SQL, error) {
	sqlCfg := &config.SQL{PluginName: sqliteplugin.PluginName}
	if dbFile == "" {
		// The sqlite plugin sets up the schema of an in-memory database
		// when it first opens it. The name must be unique in the process:
		// the plugin shares one connection per name for the process's life.
		sqlCfg.DatabaseName = "tessera-" + uuid.NewString()
		sqlCfg.ConnectAttributes = map[string]string{"mode": "memory", "cache": "shared"}
	} else {
		sqlCfg.DatabaseName = dbFile
		sqlCfg.ConnectAttributes = map[string]string{"mode": "rwc"}
		fi, err := os.Stat(dbFile)
		switch {
		case errors.Is(err, os.ErrNotExist):
			if _, err := os.Stat(filepath.Dir(dbFile)); err != nil {
				return nil, fmt.Errorf("temporal: database file's directory: %w", err)
			}
			if err := sqliteschema.SetupSchema(sqlCfg); err != nil {
				return nil, fmt.Errorf("temporal: setting up %s: %w", dbFile, err)
			}
		case err != nil:
			return nil, fmt.Errorf("temporal: database file: %w", err)
		case fi.IsDir():
			return nil, fmt.Errorf("temporal: database file %s is a directory", dbFile)
		}
	}
	nsConfigs := make([]*sqliteschema.NamespaceConfig, len(namespaces))
	for i, ns := range namespaces {
		c, err := sqliteschema.NewNamespaceConfig(clusterName, ns, false, searchAttributes)
		if err != nil {
			return nil, fmt.Errorf("temporal: namespace %q: %w", ns, err)
		}
		nsConfigs[i] = c
	}
	if err := sqliteschema.CreateNamespaces(sqlCfg, nsConfigs...); err != nil {
		return nil, fmt.Errorf("temporal: creating namespaces: %w", err)
	}
	return sqlCfg, nil
}

// serverConfig is the static configuration of a single-node server: one
// cluster, one history shard, every service in this process.
func serverConfig(host, frontendAddr string, ports map[primitives.ServiceName]int, sqlCfg *config.SQL) *config.Config {
	const store = "sqlite"
	c := &config.Config{}
	c.Global.Membership.MaxJoinDuration = 30 * time.Second
	c.Global.Membership.BroadcastAddress = loopback
	c.Persistence = config.Persistence{
		DefaultStore:     store,
		VisibilityStore:  store,
		NumHistoryShards: 1,
		DataStores:       map[string]config.DataStore{store: {SQL: sqlCfg}},
	}
	c.ClusterMetadata = &cluster.Config{
		FailoverVersionIncrement: 10,
		MasterClusterName:        clusterName,
		CurrentClusterName:       clusterName,
		ClusterInformation: map[string]cluster.ClusterInformation{
			clusterName: {
				Enabled:                true,
				InitialFailoverVersion: 1,
				RPCAddress:             frontendAddr,
				ClusterID:              uuid.NewString(),
			},
		},
	}
	c.DCRedirectionPolicy.Policy = "noop"
	c.Services = make(map[string]config.Service, len(ports))
	for svc, port := range ports {
		var sc config.Service
		sc.RPC.GRPCPort = port
		sc.RPC.BindOnIP = loopback
		if svc == primitives.FrontendService {
			sc.RPC.BindOnIP = host
		}
		c.Services[string(svc)] = sc
	}
	c.Archival.History.State = "disabled"
	c.Archival.Visibility.State = "disabled"
	c.NamespaceDefaults.Archival.History.State = "disabled"
	c.NamespaceDefaults.Archival.Visibility.State = "disabled"
	c.PublicClient.HostPort = frontendAddr
	return c
}

// recoverFatal runs f, turning the panic of a Fatal or Panic log call into
// an error.
func recoverFatal(f func() error) (err error) {
	defer func() {
		if r := recover(); r != nil {
			fe, ok := r.(fatalError)
			if !ok {
				panic(r)
			}
			err = fe
		}
	}()
	return f()
}

// waitFrontend polls the frontend until it describes every namespace.
func waitFrontend(ctx context.Context, addr string, namespaces []string) error {
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return fmt.Errorf("temporal frontend: %w", err)
	}
	defer conn.Close()
	client := workflowservice.NewWorkflowServiceClient(conn)
	for _, ns := range namespaces {
		for {
			callCtx, cancel := context.WithTimeout(ctx, 2*time.Second)
			_, err := client.DescribeNamespace(callCtx, &workflowservice.DescribeNamespaceRequest{Namespace: ns})
			cancel()
			if err == nil {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("temporal frontend %s did not serve namespace %q: %w (last: %v)", addr, ns, ctx.Err(), err)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return nil
}
