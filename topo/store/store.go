package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DialTimeout bounds how long Dial waits for etcd to answer.
const DialTimeout = 5 * time.Second

// Store is one cluster's view of etcd. It is safe for concurrent use.
type Store struct {
	cli     *clientv3.Client
	cluster string
	prefix  string // /tessera/<cluster>/
	owned   bool   // cli was created by Dial, so Close closes it
}

// CheckCluster reports whether name can be a cluster name: it becomes one
// segment of every key, so it must be non-empty and free of '/'.
func CheckCluster(name string) error {
	switch {
	case name == "":
		return errors.New("cluster name is empty")
	case strings.Contains(name, "/"):
		return fmt.Errorf("cluster name %q contains '/'", name)
	}
	return nil
}

// New returns a Store for cluster on an existing client, which the caller
// keeps owning. It panics if CheckCluster refuses the name; check names
// that come from users first.
func New(cli *clientv3.Client, cluster string) *Store {
	if err := CheckCluster(cluster); err != nil {
		panic("store.New: " + err.Error())
	}
	return &Store{cli: cli, cluster: cluster, prefix: "/tessera/" + cluster + "/"}
}

// Dial connects to etcd at endpoints and returns a Store for cluster that
// owns the client; call Close when done. Dial fails unless etcd answers a
// read within DialTimeout and before ctx ends, so a wrong address shows up
// at once rather than on first use.
func Dial(ctx context.Context, endpoints []string, cluster string) (*Store, error) {
	return DialWith(ctx, endpoints, cluster, DialOptions{})
}

// DialOptions secure the connection to etcd.
type DialOptions struct {
	// TLS, when set, is used for every endpoint (which must then be
	// https://): the server's certificate is verified, and the client's
	// is presented to a server that requires one.
	TLS *tls.Config
	// Username and Password authenticate to an etcd with auth enabled.
	Username, Password string
}

// DialWith is Dial over a secured connection.
func DialWith(ctx context.Context, endpoints []string, cluster string, opts DialOptions) (*Store, error) {
	if err := CheckCluster(cluster); err != nil {
		return nil, err
	}
	// The client's own logger would print every retry; failures that
	// matter come back as errors.
	cli, err := clientv3.New(clientv3.Config{Endpoints: endpoints, DialTimeout: DialTimeout, Logger: zap.NewNop(),
		TLS: opts.TLS, Username: opts.Username, Password: opts.Password})
	if err != nil {
		return nil, fmt.Errorf("connecting to etcd at %s: %w", strings.Join(endpoints, ","), err)
	}
	s := New(cli, cluster)
	s.owned = true
	ctx, cancel := context.WithTimeout(ctx, DialTimeout)
	defer cancel()
	if _, err := cli.Get(ctx, s.TopologyKey(), clientv3.WithCountOnly()); err != nil {
		cli.Close()
		return nil, fmt.Errorf("connecting to etcd at %s: %w", strings.Join(endpoints, ","), err)
	}
	return s, nil
}

// Close closes the client if Dial created it, which ends every Watcher
// and Registration using it; on a Store from New it does nothing.
func (s *Store) Close() error {
	if !s.owned {
		return nil
	}
	return s.cli.Close()
}

// Client returns the etcd client, for callers that need etcd directly
// (tests writing raw keys, compaction, elections).
func (s *Store) Client() *clientv3.Client { return s.cli }

// Cluster returns the cluster name.
func (s *Store) Cluster() string { return s.cluster }

// TopologyKey returns the etcd key holding the topology document.
func (s *Store) TopologyKey() string { return s.prefix + "topology" }
