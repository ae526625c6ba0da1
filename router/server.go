package router

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/router/engine"
	"github.com/tesseradb/tessera/router/planner"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store"
)

// Server is a running router.
type Server struct {
	cfg     Config
	log     *slog.Logger
	tls     *tls.Config
	lis     net.Listener
	topo    *store.Watcher
	shards  *shards
	buffers *buffers // nil when buffering is disabled
	roles   roleCache
	// hba holds the host-based rules; nil: none (hba.go).
	hba []hbaRule
	// mockSaltKey keys the salts shown for unknown roles (scram.go).
	mockSaltKey []byte
	planner     *planner.Planner
	schema      *schemaCache
	commits     commitCoordinator // atomic commits (atomic.go)
	// schemaEpoch: the latest schema change known, in Unix nanoseconds,
	// part of client statements' names on the shards (schema.go).
	schemaEpoch atomic.Int64
	// metrics and queryStats: Prometheus metrics and query insights
	// (metrics.go, querystats.go).
	metrics    *routerMetrics
	queryStats *queryStats
	// memory and spill: what the queries' operators hold and spill,
	// against the router's budget and quota (memory.go).
	memory *engine.RouterMemory
	spill  *engine.SpillArea
	// sequences serves sequences that feed tables beyond the
	// authoritative shard (sequence.go).
	sequences *sequences

	// single caches, per topology revision, the topology's one shard
	// when it has exactly one.
	single atomic.Pointer[singleShard]

	mu    sync.Mutex
	conns map[*clientConn]struct{}
	// counted is how many of conns count against MaxConnections, and
	// roleConns how many logged in as each role (admission.go).
	counted   int
	roleConns map[string]int
	cancels   map[uint32]*clientConn // by BackendKeyData process id
	closing   bool
	// draining and graceOver: Drain has begun, and its grace period
	// is over (drain.go).
	draining, graceOver atomic.Bool

	// stopAccept asks the accept loop to end (stopAccepting), and
	// acceptDone is closed when it has.
	stopAccept, acceptDone chan struct{}
	stopAcceptOnce         sync.Once

	reg *store.Registration
	// record is what reg keeps in etcd; only reportRevision changes it
	// after Start.
	record store.Record
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// New validates cfg and builds a router; Start runs it.
func New(cfg Config) (*Server, error) {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		return nil, pgerr.New(pgerr.ConfigFileError, "router: %v", err)
	}
	s := &Server{
		cfg:       cfg,
		log:       cfg.Logger,
		shards:    newShards(cfg.Secret, cfg.SidecarTLS, cfg.InProcessSidecars),
		planner:   planner.New(cfg.PlanCacheSize),
		conns:     map[*clientConn]struct{}{},
		roleConns: map[string]int{},
		cancels:   map[uint32]*clientConn{},
	}
	if cfg.HBAFile != "" {
		rules, err := loadHBA(cfg.HBAFile)
		if err != nil {
			return nil, pgerr.New(pgerr.ConfigFileError, "router host-based rules: %v", err)
		}
		s.hba = rules
	}
	if cfg.TLSCertFile != "" {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, pgerr.New(pgerr.ConfigFileError, "router TLS: %v", err)
		}
		s.tls = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	}
	if !cfg.Buffer.Disabled {
		s.buffers = newBuffers(cfg.Buffer, s.shards)
	}
	s.roles = roleCache{ttl: cfg.RoleCacheTTL, fetch: s.fetchRoles}
	s.mockSaltKey = mockSaltKey(cfg.Secret)
	s.schema = newSchemaCache(s)
	s.sequences = newSequences(s, cfg.SequenceBlock)
	s.queryStats = newQueryStats(cfg.QueryStatsSize)
	s.memory = engine.NewRouterMemory(cfg.Memory.Budget)
	s.spill = engine.NewSpillArea(cfg.Memory.SpillDir, cfg.Memory.SpillQuota)
	s.metrics = newRouterMetrics(s)
	return s, nil
}

// Start follows the topology and the sidecars, listens, and serves
// clients in the background.
func (s *Server) Start(ctx context.Context) error {
	runCtx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	w, err := s.cfg.Store.WatchTopology(runCtx)
	if err != nil {
		cancel()
		return err
	}
	s.topo = w
	if err := s.shards.follow(runCtx, s.cfg.Store); err != nil {
		cancel()
		return err
	}
	if err := s.followSchemaChanges(runCtx); err != nil {
		cancel()
		return err
	}
	if s.buffers != nil {
		go s.buffers.signals.followSignals(runCtx, s.shards)
		if err := s.buffers.tables.follow(runCtx, s.cfg.Store); err != nil {
			cancel()
			return err
		}
	}
	select {
	case <-s.shards.ready:
	case <-ctx.Done():
		cancel()
		return ctx.Err()
	case <-time.After(10 * time.Second):
	}
	lis, err := net.Listen("tcp", s.cfg.ListenAddr)
	if err != nil {
		cancel()
		return err
	}
	s.lis = lis
	// Routers register too, so that operators and clients can find them,
	// and a cutover can tell which topology each one routes by.
	s.record = store.Record{Kind: store.KindRouter, ID: "router-" + strings.ReplaceAll(lis.Addr().String(), ":", "-"),
		Addr: lis.Addr().String()}
	if snap := w.Current(); snap != nil {
		s.record.TopologyRevision = snap.Revision
	}
	reg, err := s.cfg.Store.Register(ctx, s.record, 10*time.Second)
	if err != nil {
		cancel()
		lis.Close()
		return err
	}
	s.reg = reg
	go s.reportRevision(runCtx)
	s.stopAccept, s.acceptDone = make(chan struct{}), make(chan struct{})
	s.wg.Add(1)
	go func() { defer s.wg.Done(); s.accept() }()
	s.log.Info("router serving", "addr", lis.Addr().String())
	return nil
}

// Addr is the address clients connect to.
func (s *Server) Addr() string { return s.lis.Addr().String() }

func (s *Server) accept() {
	defer close(s.acceptDone)
	var backoff time.Duration
	for {
		nc, err := s.lis.Accept()
		if err != nil {
			select {
			case <-s.stopAccept:
				// Drain or Stop: the connections the kernel has queued
				// are taken in before the socket closes (stopAccepting).
				for _, nc := range closeListener(s.lis) {
					s.serveConn(nc)
				}
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			// Out of file descriptors, a connection aborted in the
			// queue: the listener still works, and the router must not
			// stop taking clients for good because of one moment.
			backoff = min(max(2*backoff, 5*time.Millisecond), time.Second)
			s.log.Warn("accepting a client connection failed; trying again", "err", err, "in", backoff)
			select {
			case <-time.After(backoff):
			case <-s.stopAccept:
			}
			continue
		}
		backoff = 0
		s.serveConn(nc)
	}
}

// serveConn serves a connection accepted, in a goroutine of its own.
func (s *Server) serveConn(nc net.Conn) {
	c := newClientConn(s, nc)
	s.mu.Lock()
	if s.closing {
		s.mu.Unlock()
		nc.Close()
		return
	}
	if len(s.conns) >= 2*s.cfg.MaxConnections {
		s.mu.Unlock()
		refuseAtOnce(nc)
		return
	}
	s.countConnection(c)
	s.conns[c] = struct{}{}
	s.mu.Unlock()
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		c.serve()
		s.mu.Lock()
		delete(s.conns, c)
		s.uncountConnection(c)
		if c.pid != 0 {
			delete(s.cancels, c.pid)
		}
		s.mu.Unlock()
	}()
}

// stopAccepting closes the listening socket, so that new connections are
// refused, and returns once every connection accepted is among s.conns.
// The accept loop closes the socket itself, taking in first, without
// waiting, what the kernel had queued (closeListener): a connection whose
// handshake the kernel had completed is not reset by the close (libpq
// does not try another host after a reset, as it does after a refused
// connection or 57P03), but for one whose handshake completes in the
// moment between the last accept and the close.
func (s *Server) stopAccepting() {
	if s.lis == nil || s.acceptDone == nil {
		return
	}
	s.stopAcceptOnce.Do(func() {
		close(s.stopAccept)
		// Wakes the accept loop out of Accept.
		if d, ok := s.lis.(interface{ SetDeadline(time.Time) error }); !ok || d.SetDeadline(time.Now()) != nil {
			s.lis.Close()
		}
	})
	<-s.acceptDone
	s.lis.Close() // when the loop had ended otherwise
}

// Stop stops accepting, ends every client connection (their open
// transactions roll back on the shards) and stops following the topology.
func (s *Server) Stop(ctx context.Context) {
	s.mu.Lock()
	s.closing = true
	conns := make([]*clientConn, 0, len(s.conns))
	for c := range s.conns {
		conns = append(conns, c)
	}
	s.mu.Unlock()
	s.stopAccepting()
	for _, c := range conns {
		c.terminate()
	}
	done := make(chan struct{})
	go func() { s.wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	if s.reg != nil {
		s.reg.Close(ctx)
	}
	if s.cancel != nil {
		s.cancel()
	}
}

type singleShard struct {
	revision int64
	shard    string
}

// onlyShard returns the topology's shard when it has exactly one: then
// every statement runs there as it came, exactly as on one Postgres.
func (s *Server) onlyShard() string {
	snap := s.topo.Current()
	if snap == nil {
		return ""
	}
	if cur := s.single.Load(); cur != nil && cur.revision == snap.Revision {
		return cur.shard
	}
	next := &singleShard{revision: snap.Revision}
	if shards := snap.Topology.Shards(); len(shards) == 1 {
		next.shard = shards[0]
	}
	s.single.Store(next)
	return next.shard
}

// register gives a connection its cancel key.
func (s *Server) register(c *clientConn) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for {
		var b [8]byte
		randRead(b[:])
		pid := binary.BigEndian.Uint32(b[:4]) & 0x7fffffff
		if pid == 0 || s.cancels[pid] != nil {
			continue
		}
		c.pid, c.secretKey = pid, binary.BigEndian.Uint32(b[4:])
		c.cancelToken = s.cancelToken(c.pid, c.secretKey)
		s.cancels[pid] = c
		return
	}
}

// cancelToken derives the token the sidecars know a session's running
// statement by from its cancel key, keyed with the cluster secret, so
// that any router can cancel a statement from the key alone.
func (s *Server) cancelToken(pid, key uint32) string {
	m := hmac.New(sha256.New, []byte(s.cfg.Secret))
	var b [8]byte
	binary.BigEndian.PutUint32(b[:4], pid)
	binary.BigEndian.PutUint32(b[4:], key)
	m.Write(b[:])
	return hex.EncodeToString(m.Sum(nil)[:16])
}

// cancelRequest cancels what the connection with that key is running.
// Clients send CancelRequest on a new connection, which a load balancer
// may give to another router than the one serving the session; then the
// statement is found by its token on whichever sidecar runs it.
func (s *Server) cancelRequest(pid, key uint32) {
	s.mu.Lock()
	c := s.cancels[pid]
	s.mu.Unlock()
	if c != nil && c.secretKey == key {
		c.cancelRunning()
		return
	}
	token := s.cancelToken(pid, key)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	for _, in := range s.shards.all() {
		wg.Add(1)
		go func() {
			defer wg.Done()
			in.client.Cancel(ctx, &pb.CancelRequest{CancelToken: token})
		}()
	}
	wg.Wait()
}

// adminQuery runs SQL as the admin user on the authoritative shard's
// primary and returns the rows of every result, as text.
func (s *Server) adminQuery(ctx context.Context, database, sql string) ([][]string, error) {
	snap := s.topo.Current()
	if snap == nil {
		return nil, pgerr.New(pgerr.ConfigFileError, "no data topology is stored")
	}
	shard := snap.Topology.AuthoritativeShard()
	var rows [][]string
	err := s.buffers.retryRead(ctx, shard, func() (err error) {
		rows, err = s.runAdminQuery(ctx, shard, database, sql)
		return err
	})
	return rows, err
}

func (s *Server) runAdminQuery(ctx context.Context, shard, database, sql string) ([][]string, error) {
	in, err := s.shards.pick(shard, false)
	if err != nil {
		return nil, err
	}
	sess, err := in.client.OpenSession(ctx, database, s.cfg.AdminUser)
	if err != nil {
		return nil, err
	}
	defer sess.Close()
	var raw []byte
	frontend, _ := (&pgproto3.Query{String: sql}).Encode(nil)
	if _, err := sess.Run(&pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: frontend}, func(b []byte) error {
		raw = append(raw, b...)
		return nil
	}); err != nil {
		return nil, err
	}
	var rows [][]string
	var firstErr error
	err = backendMessages(raw, func(typ byte, msg []byte) error {
		switch typ {
		case 'D':
			row, err := decodeDataRow(msg)
			if err != nil {
				return err
			}
			rows = append(rows, row)
		case 'E':
			if firstErr == nil {
				firstErr = parseError(msg)
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	return rows, firstErr
}

// fetchRoles reads pg_authid and pg_database.
func (s *Server) fetchRoles(ctx context.Context) (map[string]role, map[string]bool, error) {
	rows, err := s.adminQuery(ctx, s.cfg.AdminDatabase, `SELECT 'r', rolname, coalesce(rolpassword, ''), rolcanlogin::text, coalesce(extract(epoch from rolvaliduntil)::bigint::text, ''), rolconnlimit::text, rolsuper::text FROM pg_authid
		UNION ALL SELECT 'd', datname, '', '', '', '', '' FROM pg_database WHERE datallowconn`)
	if err != nil {
		return nil, nil, err
	}
	roles, dbs := map[string]role{}, map[string]bool{}
	for _, r := range rows {
		if len(r) != 7 {
			continue
		}
		if r[0] == "d" {
			dbs[r[1]] = true
			continue
		}
		ro := role{verifier: r[2], canLogin: r[3] == "true", connLimit: -1, superuser: r[6] == "true"}
		if n, err := strconv.Atoi(r[5]); err == nil {
			ro.connLimit = n
		}
		if r[4] != "" {
			var secs int64
			for _, c := range r[4] {
				if c >= '0' && c <= '9' {
					secs = secs*10 + int64(c-'0')
				}
			}
			ro.validUntil = time.Unix(secs, 0)
		}
		roles[r[1]] = ro
	}
	return roles, dbs, nil
}

// decodeDataRow returns a DataRow's values as text ("" for NULL).
func decodeDataRow(msg []byte) ([]string, error) {
	vals := pgwire.DataRowValues(msg)
	if vals == nil {
		return nil, errors.New("short DataRow")
	}
	out := make([]string, len(vals))
	for i, v := range vals {
		out[i] = string(v)
	}
	return out, nil
}

// parseError decodes an ErrorResponse into a pgerr.Error.
func parseError(msg []byte) error { return pgwire.ParseError(msg) }
