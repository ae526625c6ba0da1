package dev

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/router"
)

// TemporalServer is a running embedded Temporal server.
type TemporalServer interface {
	FrontendAddr() string
	UIURL() string
	Stop() error
}

// TemporalStarter starts an embedded Temporal server keeping its state in
// dbFile, its frontend on frontendPort and its Web UI on uiPort.
type TemporalStarter func(ctx context.Context, dbFile string, frontendPort, uiPort int, log *slog.Logger) (TemporalServer, error)

// Config describes a dev cluster. Zero values take the defaults.
type Config struct {
	// DataDir holds everything; default ./.tessera.
	DataDir string
	// Shards is how many shards named shard-0 ... to run (default 3);
	// shards the topology names are run too.
	Shards int
	// Replicas per shard (default 1). NoReplicas forces 0.
	Replicas   int
	NoReplicas bool
	// TopologyFile, when set, is applied; otherwise every table lives in
	// the authoritative group on shard-0.
	TopologyFile string
	// Password of the superuser postgres on every instance (default
	// "postgres"); used when an instance is first created.
	Password string
	// Cluster name in the topology service (default "default").
	Cluster string
	// BasePort is the first Postgres port (default 5433).
	BasePort int
	// EtcdPort is the etcd client port (default 2379, or any free port
	// if that one is taken or it is -1).
	EtcdPort int
	// RouterPort is where clients connect (default 6432; -1 picks a free
	// port); NoRouter runs none.
	RouterPort int
	NoRouter   bool
	// RouterOverSockets makes the router reach the sidecars by their
	// unix sockets, as a router in another process would, instead of by
	// function call (benchmarks compare the two).
	RouterOverSockets bool
	// TemporalPort and TemporalUIPort default to 7233 and 8233.
	TemporalPort, TemporalUIPort int
	// Temporal starts the embedded Temporal server; nil runs none.
	Temporal TemporalStarter
	// BinDir holds the Postgres binaries; empty means discover them.
	BinDir string
	// LowDiskBytes is the sidecars' low-disk threshold (their default
	// when 0): below it an instance reports low disk and routers refuse
	// writes to it. Drills and tests raise it to see that happen.
	LowDiskBytes uint64
	// PipelineConns is how many connections per pool the sidecars let
	// autocommit statements share, pipelined: 0 means their default (one
	// per CPU), a negative number none.
	PipelineConns int
	// NoAutoPrepare turns the router's auto-prepare off by default
	// (router.Config.NoAutoPrepare).
	NoAutoPrepare bool
	// Commit is the router's default tessera.commit (router.Config.Commit).
	Commit string
	// RouterMemory bounds what the router's queries hold and spill
	// (router.Config.Memory; zero: its defaults).
	RouterMemory router.MemoryConfig
	Logger       *slog.Logger
}

var shardName = regexp.MustCompile(`^[a-z0-9][a-z0-9_-]{0,40}$`)

func (c Config) withDefaults() (Config, error) {
	if c.DataDir == "" {
		c.DataDir = ".tessera"
	}
	abs, err := filepath.Abs(c.DataDir)
	if err != nil {
		return c, err
	}
	c.DataDir = abs
	if c.Shards == 0 {
		c.Shards = 3
	}
	if c.Replicas == 0 && !c.NoReplicas {
		c.Replicas = 1
	}
	if c.Password == "" {
		c.Password = "postgres"
	}
	if c.Cluster == "" {
		c.Cluster = "default"
	}
	if c.BasePort == 0 {
		c.BasePort = 5433
	}
	if c.EtcdPort == 0 {
		c.EtcdPort = 2379
	}
	if c.RouterPort == 0 {
		c.RouterPort = 6432
	}
	if c.TemporalPort == 0 {
		c.TemporalPort = 7233
	}
	if c.TemporalUIPort == 0 {
		c.TemporalUIPort = 8233
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if c.Shards < 1 || c.Shards > 64 {
		errs = append(errs, fmt.Errorf("--shards %d: want 1 to 64", c.Shards))
	}
	if err := CheckReplicas(c.Replicas); err != nil {
		errs = append(errs, err)
	}
	if c.BasePort < 1024 || c.BasePort > 65000 {
		errs = append(errs, fmt.Errorf("base port %d out of range", c.BasePort))
	}
	return c, errors.Join(errs...)
}

// MaxReplicas bounds the replicas of a dev shard: each is a Postgres
// server and a sidecar on this machine.
const MaxReplicas = 8

// CheckReplicas refuses a replica count a dev shard cannot have.
func CheckReplicas(n int) error {
	if n < 0 || n > MaxReplicas {
		return pgerr.New(pgerr.InvalidParameterValue, "--replicas %d: want 0 to %d", n, MaxReplicas)
	}
	return nil
}

// TestPort returns a test's fixed base port moved by the
// TESSERA_TEST_PORT_OFFSET environment variable, so that two checkouts
// can run the same test packages at once on one machine.
func TestPort(base int) int {
	if off, err := strconv.Atoi(os.Getenv("TESSERA_TEST_PORT_OFFSET")); err == nil {
		return base + off
	}
	return base
}
