package sidecar

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/tesseradb/tessera/pgerr"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store"
)

// Server is a running sidecar.
//
// Goroutines: Start runs the gRPC server, the health monitor, the pool
// upkeep and, with a Store, the shard state's watch and the isolation
// fence's probes, each until Stop; gRPC runs one goroutine per call, and
// a Session call owns its backend while it holds one. Stop stops
// accepting calls, ends open streams, closes the pools and removes the
// registration.
type Server struct {
	pb.UnimplementedSidecarServer

	cfg        Config
	log        *slog.Logger
	grpc       *grpc.Server
	tls        *tls.Config // for the framed session port
	lis        net.Listener
	framedLis  net.Listener
	socketLis  net.Listener // the framed port's unix socket, or nil
	pools      pools
	cancels    cancels
	health     health
	fence      *fenceGate // closed while the instance is fenced (fence.go)
	healthKick chan struct{}
	deposeKick chan struct{} // an observation found a deposed primary (depose.go)
	// opMu serializes the self-fence of a deposed primary with the
	// operations that change what Postgres is (depose.go).
	opMu     sync.Mutex
	stopping chan struct{}
	cancel   context.CancelFunc
	runCtx   context.Context // ends with Stop
	wg       sync.WaitGroup

	localMu sync.Mutex
	locals  map[*localStream]struct{} // open in-process sessions (inprocess.go)

	regMu sync.Mutex
	reg   *store.Registration
}

// New validates cfg and builds a sidecar; Start runs it.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, pgerr.New(pgerr.ConfigFileError, "sidecar %s: %v", cfg.InstanceID, err)
	}
	opts := []grpc.ServerOption{
		grpc.ChainUnaryInterceptor(unaryAuth(cfg.Secret)),
		grpc.ChainStreamInterceptor(streamAuth(cfg.Secret)),
		grpc.MaxRecvMsgSize(64 << 20),
	}
	var tlsConfig *tls.Config
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, pgerr.New(pgerr.ConfigFileError, "sidecar TLS: %v", err)
		}
		tlsConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		if cfg.TLSClientCAFile != "" {
			pool, err := loadCAPool(cfg.TLSClientCAFile)
			if err != nil {
				return nil, pgerr.New(pgerr.ConfigFileError, "sidecar TLS client CA: %v", err)
			}
			tlsConfig.ClientCAs, tlsConfig.ClientAuth = pool, tls.RequireAndVerifyClientCert
		}
		opts = append(opts, grpc.Creds(credentials.NewTLS(tlsConfig)))
	}
	s := &Server{
		cfg:        cfg,
		log:        cfg.Logger.With("shard", cfg.ShardUID, "instance", cfg.InstanceID),
		grpc:       grpc.NewServer(opts...),
		pools:      pools{cfg: cfg.Pool, connStr: cfg.Manager.ConnConfig},
		healthKick: make(chan struct{}, 1),
		deposeKick: make(chan struct{}, 1),
		stopping:   make(chan struct{}),
		fence:      newFenceGate(),
		tls:        tlsConfig,
	}
	pb.RegisterSidecarServer(s.grpc, s)
	return s, nil
}

// Start listens and serves in the background. It returns once the first
// health observation is made and, with a Store, the sidecar is registered.
func (s *Server) Start(ctx context.Context) error {
	lis, err := net.Listen("tcp", s.cfg.ListenAddr)
	if err != nil {
		return err
	}
	s.lis = lis
	if s.cfg.SessionListenAddr != "" {
		if s.framedLis, err = net.Listen("tcp", s.cfg.SessionListenAddr); err != nil {
			lis.Close()
			return err
		}
		if s.cfg.SessionSocket != "" {
			if s.socketLis, err = listenSocket(s.cfg.SessionSocket); err != nil {
				lis.Close()
				s.framedLis.Close()
				return err
			}
		}
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel, s.runCtx = cancel, runCtx
	s.locals = map[*localStream]struct{}{}
	stateRead := time.Now() // the isolation fence counts from this read
	if s.cfg.Store != nil {
		// Before the first observation, which may open the gate.
		if err := s.readShardState(ctx); err != nil {
			cancel()
			lis.Close()
			s.closeFramed()
			return err
		}
	}
	s.health.publish(s.observe(ctx))
	if s.cfg.Store != nil {
		if err := s.register(ctx, s.health.latest().Role); err != nil {
			cancel()
			lis.Close()
			s.closeFramed()
			return err
		}
	}
	s.wg.Add(5)
	go func() { defer s.wg.Done(); s.depose(runCtx) }()
	go func() { defer s.wg.Done(); s.grpc.Serve(lis) }()
	go func() { defer s.wg.Done(); s.monitor(runCtx) }()
	go func() { defer s.wg.Done(); s.pools.maintain(runCtx, time.Second) }()
	go func() { defer s.wg.Done(); s.watchPipelines(runCtx) }()
	if s.cfg.Store != nil {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.followShardState(runCtx) }()
	}
	if s.cfg.IsolationFence > 0 {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.watchIsolation(runCtx, stateRead) }()
	}
	for _, l := range []net.Listener{s.framedLis, s.socketLis} {
		if l != nil {
			s.wg.Add(1)
			go func() { defer s.wg.Done(); s.serveFramed(l) }()
		}
	}
	s.publishInProcess()
	s.log.Info("sidecar serving", "addr", s.Addr())
	return nil
}

// Addr is the address the gRPC server listens on.
func (s *Server) Addr() string {
	if s.lis == nil {
		return ""
	}
	return s.lis.Addr().String()
}

// sessionAddr is the framed session port's address, if it has one.
func (s *Server) sessionAddr() string {
	if s.framedLis == nil {
		return ""
	}
	return s.framedLis.Addr().String()
}

// advertisedSession is the session address published in the topology
// service.
func (s *Server) advertisedSession() string {
	if s.framedLis != nil && s.cfg.SessionAdvertiseAddr != "" {
		return s.cfg.SessionAdvertiseAddr
	}
	return s.sessionAddr()
}

// loadCAPool reads a PEM file of CA certificates.
func loadCAPool(file string) (*x509.CertPool, error) {
	pem, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("%s holds no PEM certificate", file)
	}
	return pool, nil
}

// SessionAddr is the framed session port's address ("" without one).
func (s *Server) SessionAddr() string { return s.sessionAddr() }

func (s *Server) advertised() string {
	if s.cfg.AdvertiseAddr != "" {
		return s.cfg.AdvertiseAddr
	}
	return s.Addr()
}

// Stop stops the sidecar; calls in flight end, pinned backends are
// cleaned or closed, the registration disappears. Idempotent.
func (s *Server) Stop(ctx context.Context) {
	select {
	case <-s.stopping:
		return
	default:
	}
	close(s.stopping)
	if s.cancel != nil {
		s.cancel()
	}
	s.closeFramed()
	s.withdrawInProcess()
	done := make(chan struct{})
	go func() { s.grpc.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		s.grpc.Stop()
	case <-time.After(5 * time.Second):
		s.grpc.Stop()
	}
	s.wg.Wait()
	s.pools.close()
	s.regMu.Lock()
	if s.reg != nil {
		s.reg.Close(ctx)
		s.reg = nil
	}
	s.regMu.Unlock()
}

// register publishes the sidecar in the topology service.
func (s *Server) register(ctx context.Context, role string) error {
	if role == "" {
		role = store.RolePrimary
	}
	reg, err := s.cfg.Store.Register(ctx, s.record(role), s.cfg.RegistrationTTL)
	if err != nil {
		return err
	}
	s.regMu.Lock()
	s.reg = reg
	s.regMu.Unlock()
	return nil
}

func (s *Server) record(role string) store.Record {
	return store.Record{
		Kind:          store.KindSidecar,
		ID:            s.cfg.InstanceID,
		ShardUID:      s.cfg.ShardUID,
		InstanceID:    s.cfg.InstanceID,
		Role:          role,
		Zone:          s.cfg.Zone,
		PostgresAddr:  s.cfg.PostgresAddr,
		GRPCAddr:      s.advertised(),
		SessionAddr:   s.advertisedSession(),
		SessionSocket: s.sessionSocket(),
	}
}

// sessionSocket is the framed port's unix socket path, if it has one.
func (s *Server) sessionSocket() string {
	if s.socketLis == nil {
		return ""
	}
	return s.cfg.SessionSocket
}

// SessionSocket is the framed session port's unix socket ("" without one).
func (s *Server) SessionSocket() string { return s.sessionSocket() }

func (s *Server) closeFramed() {
	for _, l := range []net.Listener{s.framedLis, s.socketLis} {
		if l != nil {
			l.Close()
		}
	}
}

// listenSocket listens on a unix socket at path, replacing a stale one
// (a sidecar that died without closing it) but not a live one, readable
// and writable by this OS user only: the hello's secret is checked as on
// TCP, and the mode keeps other local users from even trying. The socket
// is made under a temporary name and renamed into place once its mode is
// set, so the path never names a socket others may open.
func listenSocket(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		if c, err := net.DialTimeout("unix", path, time.Second); err == nil {
			c.Close()
			return nil, fmt.Errorf("session socket %s: another process listens there", path)
		}
		os.Remove(path)
	}
	tmp := fmt.Sprintf("%s.%d", path, os.Getpid())
	os.Remove(tmp)
	l, err := net.Listen("unix", tmp)
	if err != nil {
		return nil, fmt.Errorf("session socket: %w", err)
	}
	ul := l.(*net.UnixListener)
	// Close removes the socket by its final name (socketListener), not
	// by the name it was made under.
	ul.SetUnlinkOnClose(false)
	if err := os.Chmod(tmp, 0o600); err != nil {
		l.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("session socket: %w", err)
	}
	if err := os.Rename(tmp, path); err != nil {
		l.Close()
		os.Remove(tmp)
		return nil, fmt.Errorf("session socket: %w", err)
	}
	return socketListener{ul, path}, nil
}

// socketListener removes its socket file when it closes.
type socketListener struct {
	*net.UnixListener
	path string
}

func (l socketListener) Close() error {
	err := l.UnixListener.Close()
	os.Remove(l.path)
	return err
}

// roleChanged keeps the registered role current.
func (s *Server) roleChanged(ctx context.Context, role string) {
	s.regMu.Lock()
	reg := s.reg
	s.regMu.Unlock()
	if reg == nil || role == "" {
		return
	}
	if err := reg.Update(ctx, s.record(role)); err != nil {
		s.log.Warn("updating registration", "role", role, "err", err)
	}
}
