package main

import (
	"context"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/topo/store"
)

// etcdFlags are the flags of every command that talks to the topology
// service, defaulting from the environment.
type etcdFlags struct {
	endpoints string
	cluster   string
}

func (f *etcdFlags) register(cmd *cobra.Command) {
	cmd.PersistentFlags().StringVar(&f.endpoints, "etcd", envOr("TESSERA_ETCD", "http://127.0.0.1:2379"),
		"comma-separated etcd endpoints of the topology service (env TESSERA_ETCD)")
	cmd.PersistentFlags().StringVar(&f.cluster, "cluster", envOr("TESSERA_CLUSTER", "default"),
		"cluster name: the topology service keeps each cluster under /tessera/<cluster>/ (env TESSERA_CLUSTER)")
}

// dial validates the flags and connects.
func (f *etcdFlags) dial(ctx context.Context) (*store.Store, error) {
	var endpoints []string
	for _, e := range strings.Split(f.endpoints, ",") {
		if e = strings.TrimSpace(e); e != "" {
			endpoints = append(endpoints, e)
		}
	}
	if len(endpoints) == 0 {
		return nil, fmt.Errorf("--etcd names no endpoint")
	}
	return store.Dial(ctx, endpoints, f.cluster)
}

func envOr(name, fallback string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return fallback
}
