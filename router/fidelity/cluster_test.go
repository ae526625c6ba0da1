package fidelity_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/dev"
	"github.com/tesseradb/tessera/dev/testwatch"
)

// The differential tests (TestDifferential, TestQueryGen, TestTPCH) share
// one cluster: starting one takes most of a test's time in CI. It is
// started by the first test that asks for it and stopped by TestMain.
var shared struct {
	once    sync.Once
	err     error
	base    string
	cluster *dev.Cluster
	stop    context.CancelFunc
	// router is the router's address; primaries each shard's primary's.
	router    string
	primaries map[string]string
	// loaded says which data sets are in place: "diff" (the harness's
	// schema and data, in diff through the router and in diffref on
	// shard-0's Postgres) or "tpch".
	mu     sync.Mutex
	loaded map[string]bool
}

func TestMain(m *testing.M) {
	testwatch.Start()
	code := m.Run()
	if shared.cluster != nil {
		shared.cluster.Stop(context.Background())
	}
	if shared.stop != nil {
		shared.stop()
	}
	if shared.base != "" {
		os.RemoveAll(shared.base)
	}
	os.Exit(code)
}

// topologies are merged into the shared cluster's topology: the
// differential schema's and TPC-H's, each a file of its own that `tessera
// dev --topology` also takes.
var topologies = []string{"../../testdata/topologies/differential.json", "../../testdata/topologies/tpch.json"}

// sharedCluster starts the shared cluster once: four shards (shard-0 …
// shard-3) without replicas, under the merged topologies.
func sharedCluster(t *testing.T) {
	t.Helper()
	shared.once.Do(func() {
		shared.base, shared.err = os.MkdirTemp("", "differential-")
		if shared.err != nil {
			return
		}
		os.Chmod(shared.base, 0o755)
		file := filepath.Join(shared.base, "topology.json")
		if shared.err = mergeTopologies(file, topologies...); shared.err != nil {
			return
		}
		ctx, cancel := context.WithCancel(context.Background())
		shared.stop = cancel
		start, done := context.WithTimeout(ctx, 5*time.Minute)
		defer done()
		shared.cluster, shared.err = dev.Start(start, dev.Config{
			DataDir: filepath.Join(shared.base, "data"), Shards: 1, NoReplicas: true,
			TopologyFile: file,
			BasePort:     dev.TestPort(29633), EtcdPort: -1, RouterPort: -1,
		})
		if shared.err != nil {
			return
		}
		shared.primaries = map[string]string{}
		for _, s := range shared.cluster.Info().Shards {
			for _, in := range s.Instances {
				if in.Role == "primary" {
					shared.primaries[s.UID] = fmt.Sprintf("127.0.0.1:%d", in.Port)
				}
			}
		}
		shared.router = shared.cluster.Info().Router
		shared.loaded = map[string]bool{}
	})
	if shared.err != nil {
		t.Fatal(shared.err)
	}
}

// mergeTopologies writes to out one topology holding the shard indexes,
// shard groups (the same uid must mean the same group) and databases of
// every file.
func mergeTopologies(out string, files ...string) error {
	merged := map[string]any{}
	indexes, databases := map[string]any{}, map[string]any{}
	var groups []any
	seen := map[string]bool{}
	for _, f := range files {
		doc, err := os.ReadFile(f)
		if err != nil {
			return err
		}
		var top map[string]any
		if err := json.Unmarshal(doc, &top); err != nil {
			return fmt.Errorf("%s: %w", f, err)
		}
		for k, v := range top {
			switch k {
			case "shard_indexes":
				for name, ix := range v.(map[string]any) {
					indexes[name] = ix
				}
			case "databases":
				for name, db := range v.(map[string]any) {
					if databases[name] != nil {
						return fmt.Errorf("%s: database %s is in another topology too", f, name)
					}
					databases[name] = db
				}
			case "shard_groups":
				for _, g := range v.([]any) {
					uid := g.(map[string]any)["uid"].(string)
					if !seen[uid] {
						seen[uid] = true
						groups = append(groups, g)
					}
				}
			default:
				merged[k] = v
			}
		}
	}
	merged["shard_indexes"], merged["databases"], merged["shard_groups"] = indexes, databases, groups
	doc, err := json.MarshalIndent(merged, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(out, doc, 0o644)
}

// connect opens a connection to db at addr, closed when t ends.
func connect(t *testing.T, ctx context.Context, addr, db string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@%s/%s?sslmode=disable", addr, db))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// loadOnce creates database name through the router and name+"ref" on
// shard-0's Postgres (the same build and locale as every shard's) and
// runs load on both, once per test binary.
func loadOnce(t *testing.T, ctx context.Context, name string, load func(tessera, ref *pgx.Conn)) (tessera, ref *pgx.Conn) {
	t.Helper()
	sharedCluster(t)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.loaded[name] {
		mustExec(t, connect(t, ctx, shared.router, "postgres"), "CREATE DATABASE "+name)
		mustExec(t, connect(t, ctx, shared.primaries["shard-0"], "postgres"), "CREATE DATABASE "+name+"ref")
		load(connect(t, ctx, shared.router, name), connect(t, ctx, shared.primaries["shard-0"], name+"ref"))
		shared.loaded[name] = true
	}
	return connect(t, ctx, shared.router, name), connect(t, ctx, shared.primaries["shard-0"], name+"ref")
}

// diffDatabases are connections to the differential data set: through
// the router and to the reference.
func diffDatabases(t *testing.T, ctx context.Context) (tessera, ref *pgx.Conn) {
	return loadOnce(t, ctx, "diff", func(tessera, ref *pgx.Conn) {
		load := append(schema(), data()...)
		mustExec(t, tessera, load...)
		mustExec(t, ref, load...)
		checkSpread(t, ctx, func(shard string) *pgx.Conn { return connect(t, ctx, shared.primaries[shard], "diff") })
	})
}
