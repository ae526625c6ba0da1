package cli

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/dev"
	"github.com/tesseradb/tessera/tlsfiles"
	"github.com/tesseradb/tessera/topo/store"
)

// clusterFlags are the flags of every command that talks to a running
// cluster. Without --etcd (or TESSERA_ETCD), a dev cluster's cluster.json
// in --data says where etcd is, so commands work against `tessera dev`
// with no flags at all.
type clusterFlags struct {
	endpoints  string
	cluster    string
	dataDir    string
	secretFile string
	// etcd's TLS, and its credentials (the password from a file).
	etcdTLS                    tlsfiles.Client
	etcdUser, etcdPasswordFile string
	cmd                        *cobra.Command
}

func (f *clusterFlags) register(cmd *cobra.Command) {
	f.cmd = cmd
	pf := cmd.PersistentFlags()
	pf.StringVar(&f.endpoints, "etcd", os.Getenv("TESSERA_ETCD"),
		"comma-separated etcd endpoints of the topology service (env TESSERA_ETCD; default: the dev cluster's, else http://127.0.0.1:2379)")
	pf.StringVar(&f.cluster, "cluster", envOr("TESSERA_CLUSTER", "default"),
		"cluster name: the topology service keeps each cluster under /tessera/<cluster>/ (env TESSERA_CLUSTER)")
	pf.StringVar(&f.dataDir, "data", ".tessera", "a dev cluster's data directory, read for its addresses when --etcd is not given")
	pf.StringVar(&f.secretFile, "secret-file", os.Getenv("TESSERA_SECRET_FILE"),
		"file holding the cluster credential sidecars require (env TESSERA_SECRET_FILE; default: the dev cluster's)")
	tlsClientFlags(pf, "etcd", "etcd", &f.etcdTLS)
	pf.StringVar(&f.etcdUser, "etcd-user", os.Getenv("TESSERA_ETCD_USER"),
		"etcd user, for an etcd with authentication on (env TESSERA_ETCD_USER; with --etcd-password-file)")
	pf.StringVar(&f.etcdPasswordFile, "etcd-password-file", os.Getenv("TESSERA_ETCD_PASSWORD_FILE"),
		"file holding the etcd user's password (env TESSERA_ETCD_PASSWORD_FILE)")
}

// etcdOptions reads the files that secure the connection to etcd.
func (f *clusterFlags) etcdOptions() (store.DialOptions, error) {
	var opts store.DialOptions
	var err error
	if opts.TLS, err = f.etcdTLS.Config(); err != nil {
		return opts, fmt.Errorf("etcd TLS: %w", err)
	}
	if (f.etcdUser == "") != (f.etcdPasswordFile == "") {
		return opts, errors.New("etcd credentials need both --etcd-user and --etcd-password-file")
	}
	if f.etcdUser != "" {
		data, err := os.ReadFile(f.etcdPasswordFile)
		if err != nil {
			return opts, fmt.Errorf("reading the etcd password: %w", err)
		}
		opts.Username, opts.Password = f.etcdUser, strings.TrimRight(string(data), "\r\n")
	}
	return opts, nil
}

// devInfo returns the dev cluster's cluster.json when --etcd was not given.
func (f *clusterFlags) devInfo() *dev.Info {
	if f.endpoints != "" {
		return nil
	}
	info, err := dev.ReadInfo(f.dataDir)
	if err != nil {
		return nil
	}
	return info
}

// dial validates the flags and connects.
func (f *clusterFlags) dial(ctx context.Context) (*store.Store, error) {
	list, cluster, err := f.locate()
	if err != nil {
		return nil, err
	}
	opts, err := f.etcdOptions()
	if err != nil {
		return nil, err
	}
	return store.DialWith(ctx, list, cluster, opts)
}

// locate returns the etcd endpoints and the cluster name the flags give.
func (f *clusterFlags) locate() ([]string, string, error) {
	endpoints, cluster := f.endpoints, f.cluster
	if info := f.devInfo(); info != nil {
		endpoints = strings.Join(info.Etcd, ",")
		if !f.cmd.Flags().Changed("cluster") && os.Getenv("TESSERA_CLUSTER") == "" {
			cluster = info.Cluster
		}
	}
	if endpoints == "" {
		endpoints = "http://127.0.0.1:2379"
	}
	var list []string
	for _, e := range strings.Split(endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			list = append(list, e)
		}
	}
	if len(list) == 0 {
		return nil, "", fmt.Errorf("--etcd names no endpoint")
	}
	return list, cluster, nil
}

// secret reads the cluster credential.
func (f *clusterFlags) secret() (string, error) {
	path := f.secretFile
	if path == "" {
		if info := f.devInfo(); info != nil {
			path = info.SecretFile
		} else {
			path = filepath.Join(f.dataDir, "secret")
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("reading the cluster credential: %w (give --secret-file)", err)
	}
	return strings.TrimSpace(string(data)), nil
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
