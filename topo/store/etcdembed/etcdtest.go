// Package etcdtest runs a single-member etcd inside the process, for tests
// and for development, so that neither needs an etcd installed. It is kept
// apart from package store so that binaries needing only the etcd client
// do not link the server.
package etcdtest

import (
	"errors"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
)

// startTimeout bounds how long Start waits for the member to elect itself
// leader and serve.
const startTimeout = 30 * time.Second

// Server is a running embedded etcd member.
type Server struct {
	// Endpoints are the client URLs to give clientv3.
	Endpoints []string

	etcd *embed.Etcd
	dir  string
}

// StartServer starts an etcd member listening on loopback ports chosen by
// the kernel, with its data in a new temporary directory. It logs nothing,
// skips fsync (its data is thrown away), and uses short raft
// timings so that it starts quickly and grants leases as short as one
// second. Stop it with Stop.
func StartServer() (*Server, error) {
	dir, err := os.MkdirTemp("", "etcdtest-")
	if err != nil {
		return nil, err
	}
	// Port 0 lets the kernel choose, so parallel test binaries never
	// collide; the member never dials its own peer URL, so it need not be
	// reachable, and the client port is read back from the listener.
	local := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	cfg := embed.NewConfig()
	cfg.Name = "etcdtest"
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{local}
	cfg.AdvertiseClientUrls = []url.URL{local}
	cfg.ListenPeerUrls = []url.URL{local}
	cfg.AdvertisePeerUrls = []url.URL{local}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Tests and `tessera dev` want etcd silent; StartServer reports the
	// failures that matter.
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = true
	// etcd's minimum lease TTL is 1.5 election timeouts, rounded up to a
	// second: 100ms elections allow one-second leases, so tests of lease
	// expiry are quick.
	cfg.TickMs = 10
	cfg.ElectionMs = 100

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("starting embedded etcd: %w", err)
	}
	s := &Server{etcd: e, dir: dir}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		s.Stop()
		return nil, fmt.Errorf("starting embedded etcd: %w", err)
	case <-time.After(startTimeout):
		s.Stop()
		return nil, errors.New("starting embedded etcd: not ready after " + startTimeout.String())
	}
	for _, l := range e.Clients {
		s.Endpoints = append(s.Endpoints, "http://"+l.Addr().String())
	}
	return s, nil
}

// Stop stops the member and removes its data.
func (s *Server) Stop() {
	s.etcd.Close()
	os.RemoveAll(s.dir)
}

// Start starts a member for tb, stopped when tb's test ends, and returns
// its client endpoints.
func Start(tb testing.TB) []string {
	tb.Helper()
	s, err := StartServer()
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(s.Stop)
	return s.Endpoints
}
