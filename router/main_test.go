package router_test

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/dev"
	"github.com/tesseradb/tessera/dev/testwatch"
)

// cluster is one dev cluster for the package: shard-0 (the authoritative
// group) and the store example's customer-shard-1 and -2, each with a
// replica, and a router.
var cluster *dev.Cluster

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse()
	if spec := os.Getenv(routerProcessEnv); spec != "" {
		// A router process of a test (routerprocess_test.go): the
		// cluster is its parent's.
		return runRouterProcess(spec)
	}
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		// Fuzzing (go test -run XXX -fuzz ...) needs no cluster, and its
		// worker processes must not each start one.
		return m.Run()
	}
	defer testwatch.Start()()
	base, err := os.MkdirTemp("", "router-test-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(base)
	os.Chmod(base, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cluster, err = dev.Start(ctx, dev.Config{
		DataDir:      filepath.Join(base, "data"),
		Shards:       1,
		Replicas:     1,
		TopologyFile: "../testdata/topologies/store_xxhash.json",
		BasePort:     dev.TestPort(28433),
		EtcdPort:     -1,
		RouterPort:   -1,
	})
	if err != nil {
		log.Print(err)
		return 1
	}
	defer cluster.Stop(context.Background())
	if err := setup(ctx); err != nil {
		log.Print(err)
		return 1
	}
	return m.Run()
}

// setup creates the store database through the router.
func setup(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, dsn("postgres"))
	if err != nil {
		return err
	}
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE DATABASE store")
	return err
}

func dsn(database string) string {
	return fmt.Sprintf("postgres://postgres:postgres@%s/%s?sslmode=disable", cluster.Info().Router, database)
}

func connect(t *testing.T, database string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn(database))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// mustExec runs each statement on conn in turn, failing the test at the
// first error.
func mustExec(t *testing.T, conn *pgx.Conn, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// direct connects to a shard's primary, bypassing the router.
func direct(t *testing.T, shard, database string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), shardDSN(t, shard, database))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// shardDSN addresses a shard's primary.
func shardDSN(t *testing.T, shard, database string) string {
	t.Helper()
	for _, s := range cluster.Info().Shards {
		if s.UID != shard {
			continue
		}
		for _, in := range s.Instances {
			if in.Role == "primary" {
				return fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/%s?sslmode=disable", in.Port, database)
			}
		}
	}
	t.Fatalf("no primary for %s", shard)
	return ""
}
