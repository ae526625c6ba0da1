// Package etcdembed runs a single-member etcd inside the process, for tests
// and for `tessera dev`, so that neither needs an etcd installed. It is kept
// apart from package store so that binaries needing only the etcd client
// do not link the server.
package etcdembed

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
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

	etcd      *embed.Etcd
	dir       string
	temporary bool
}

// StartServer starts an etcd member listening on loopback ports chosen by
// the kernel, with its data in a new temporary directory. It logs nothing,
// skips fsync (its data is thrown away), and uses short raft
// timings so that it starts quickly and grants leases as short as one
// second. Stop it with Stop.
func StartServer() (*Server, error) {
	return Run(Options{})
}

// Options place a member's data and client port.
type Options struct {
	// Dir keeps the member's data; empty means a new temporary directory,
	// removed by Stop. A directory that holds data resumes it.
	Dir string
	// ClientAddr is the client listen address; empty means 127.0.0.1 on
	// a port the kernel chooses.
	ClientAddr string
	// CertFile and KeyFile, when set, make the client port TLS only
	// (https endpoints); ClientCAFile, when set too, requires clients to
	// present a certificate it signed.
	CertFile, KeyFile, ClientCAFile string
	// Name, PeerAddr and InitialCluster make the member one of a cluster
	// of several (each in a process, or on a host, of its own): its name,
	// the host:port its peers reach it at (listened on and advertised),
	// and every member as name=http://host:port, comma-separated, as
	// etcd's --initial-cluster. Empty: a cluster of this member alone.
	// A member of several waits for a quorum before Run returns, and
	// uses raft timings that tolerate a loaded machine.
	Name, PeerAddr, InitialCluster string
}

// Run starts a member as StartServer does, placed by opts.
func Run(opts Options) (*Server, error) {
	dir, temporary := opts.Dir, opts.Dir == ""
	if temporary {
		var err error
		if dir, err = os.MkdirTemp("", "etcdembed-"); err != nil {
			return nil, err
		}
	}
	clientAddr := opts.ClientAddr
	if clientAddr == "" {
		clientAddr = "127.0.0.1:0"
	}
	// Port 0 lets the kernel choose, so parallel test binaries never
	// collide; the member never dials its own peer URL, so it need not be
	// reachable, and the client port is read back from the listener.
	local := url.URL{Scheme: "http", Host: "127.0.0.1:0"}
	scheme := "http"
	if opts.CertFile != "" {
		scheme = "https"
	}
	client := url.URL{Scheme: scheme, Host: clientAddr}
	cfg := embed.NewConfig()
	cfg.Name = "etcdembed"
	if opts.Name != "" {
		cfg.Name = opts.Name
	}
	if opts.PeerAddr != "" {
		local = url.URL{Scheme: "http", Host: opts.PeerAddr}
	}
	cfg.Dir = dir
	cfg.ListenClientUrls = []url.URL{client}
	cfg.AdvertiseClientUrls = []url.URL{client}
	cfg.ListenPeerUrls = []url.URL{local}
	cfg.AdvertisePeerUrls = []url.URL{local}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	if opts.InitialCluster != "" {
		cfg.InitialCluster = opts.InitialCluster
		cfg.InitialClusterToken = "tessera"
	}
	if opts.CertFile != "" {
		cfg.ClientTLSInfo.CertFile, cfg.ClientTLSInfo.KeyFile = opts.CertFile, opts.KeyFile
		if opts.ClientCAFile != "" {
			cfg.ClientTLSInfo.TrustedCAFile, cfg.ClientTLSInfo.ClientCertAuth = opts.ClientCAFile, true
		}
	}
	// Tests and `tessera dev` want etcd silent; StartServer reports the
	// failures that matter.
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zap.NewNop())
	cfg.UnsafeNoFsync = temporary
	// etcd's minimum lease TTL is 1.5 election timeouts, rounded up to a
	// second: 100ms elections allow one-second leases, so tests of lease
	// expiry are quick.
	cfg.TickMs = 10
	cfg.ElectionMs = 100
	if opts.InitialCluster != "" {
		// Members of several exchange heartbeats over a network on a
		// machine that may be busy: 100ms elections would change leader
		// at every stall.
		cfg.TickMs = 50
		cfg.ElectionMs = 1000
	}

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		if temporary {
			os.RemoveAll(dir)
		}
		return nil, fmt.Errorf("starting embedded etcd: %w", err)
	}
	s := &Server{etcd: e, dir: dir, temporary: temporary}
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
		s.Endpoints = append(s.Endpoints, scheme+"://"+l.Addr().String())
	}
	return s, nil
}

// EnableAuth turns etcd's authentication on: a root user with
// rootPassword, and user with password, whose role may read and write
// every key under prefix.
func (s *Server) EnableAuth(rootPassword, user, password, prefix string) error {
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.Endpoints, DialTimeout: startTimeout, Logger: zap.NewNop()})
	if err != nil {
		return err
	}
	defer cli.Close()
	ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
	defer cancel()
	for _, step := range []func() error{
		func() error { _, err := cli.UserAdd(ctx, "root", rootPassword); return err },
		func() error { _, err := cli.UserGrantRole(ctx, "root", "root"); return err },
		func() error { _, err := cli.RoleAdd(ctx, user); return err },
		func() error {
			_, err := cli.RoleGrantPermission(ctx, user, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite))
			return err
		},
		func() error { _, err := cli.UserAdd(ctx, user, password); return err },
		func() error { _, err := cli.UserGrantRole(ctx, user, user); return err },
		func() error { _, err := cli.AuthEnable(ctx); return err },
	} {
		if err := step(); err != nil {
			return fmt.Errorf("enabling etcd authentication: %w", err)
		}
	}
	return nil
}

// Stop stops the member and removes its data if it was temporary.
func (s *Server) Stop() {
	s.etcd.Close()
	if s.temporary {
		os.RemoveAll(s.dir)
	}
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
