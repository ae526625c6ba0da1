package dev_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tesseradb/tessera/dev"
	"github.com/tesseradb/tessera/topo/store"
)

// postgresProcesses lists the postgres processes whose command line
// mentions dir.
func postgresProcesses(t *testing.T, dir string) []string {
	t.Helper()
	entries, _ := os.ReadDir("/proc")
	var out []string
	for _, e := range entries {
		cmdline, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		cmd := strings.ReplaceAll(string(cmdline), "\x00", " ")
		if strings.Contains(cmd, "postgres") && strings.Contains(cmd, dir) {
			out = append(out, e.Name()+": "+cmd)
		}
	}
	return out
}

func connect(t *testing.T, ctx context.Context, port int) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:secret-pw@127.0.0.1:%d/postgres?sslmode=disable", port))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// TestClusterLifecycle: up, status, a new shard, stop with nothing left
// behind, and up again on the same data.
func TestClusterLifecycle(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	base, err := os.MkdirTemp("", "dev-test-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	os.Chmod(base, 0o755)
	cfg := dev.Config{
		DataDir:    filepath.Join(base, "data"),
		Shards:     2,
		Replicas:   1,
		Password:   "secret-pw",
		BasePort:   dev.TestPort(25433),
		EtcdPort:   dev.TestPort(23790),
		RouterPort: -1,
	}
	c, err := dev.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop(context.Background())
		}
	}()

	info, err := dev.ReadInfo(cfg.DataDir)
	if err != nil {
		t.Fatal(err)
	}
	if len(info.Shards) != 2 || info.Shards[0].UID != "shard-0" || len(info.Shards[0].Instances) != 2 || len(info.Etcd) != 1 {
		t.Fatalf("cluster.json: %+v", info)
	}
	primary := info.Shards[0].Instances[0]
	if primary.Role != "primary" || info.Shards[0].Instances[1].Role != "replica" || primary.Sidecar == "" {
		t.Fatalf("roles: %+v", info.Shards[0])
	}
	// The default topology keeps everything on shard-0.
	snap, err := c.Store().GetTopology(ctx)
	if err != nil || snap.Topology.AuthoritativeShard() != "shard-0" {
		t.Fatalf("topology: %v %v", snap, err)
	}
	// Every instance is registered.
	recs, err := c.Store().ListRecords(ctx, store.KindSidecar)
	if err != nil || len(recs) != 4 {
		t.Fatalf("records: %+v %v", recs, err)
	}

	// Write on shard-0's primary; the replica catches up.
	conn := connect(t, ctx, primary.Port)
	if _, err := conn.Exec(ctx, "CREATE TABLE kept (v text); INSERT INTO kept VALUES ('before restart')"); err != nil {
		t.Fatal(err)
	}
	replica := connect(t, ctx, info.Shards[0].Instances[1].Port)
	deadline := time.Now().Add(20 * time.Second)
	for {
		var v string
		if err := replica.QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err == nil && v == "before restart" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the replica did not catch up")
		}
		time.Sleep(100 * time.Millisecond)
	}

	// tessera shard create, through etcd as the CLI does it.
	client, err := store.Dial(ctx, info.Etcd, info.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	added, err := dev.RequestShard(ctx, client, "extra", 0, 2*time.Minute)
	if err != nil || added.UID != "extra" || len(added.Instances) != 1 {
		t.Fatalf("shard create: %+v %v", added, err)
	}
	if _, err := dev.RequestShard(ctx, client, "extra", 0, time.Minute); err == nil {
		t.Error("creating a running shard again succeeded")
	}

	conn.Close(ctx)
	replica.Close(ctx)
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if left := postgresProcesses(t, cfg.DataDir); len(left) > 0 {
		t.Fatalf("processes left after Stop:\n%s", strings.Join(left, "\n"))
	}

	// Up again on the same data: same ports, same data, the added shard.
	c, err = dev.Start(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	stopped = false
	again := c.Info()
	if len(again.Shards) != 3 || shardOf(again, "shard-0").Instances[0].Port != primary.Port || shardOf(again, "extra") == nil {
		t.Fatalf("resumed cluster: %+v", again)
	}
	var v string
	if err := connect(t, ctx, primary.Port).QueryRow(ctx, "SELECT v FROM kept").Scan(&v); err != nil || v != "before restart" {
		t.Fatalf("data after restart: %q %v", v, err)
	}
	if err := c.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if left := postgresProcesses(t, cfg.DataDir); len(left) > 0 {
		t.Fatalf("processes left after the second Stop:\n%s", strings.Join(left, "\n"))
	}
}

func shardOf(info dev.Info, uid string) *dev.ShardInfo {
	for i := range info.Shards {
		if info.Shards[i].UID == uid {
			return &info.Shards[i]
		}
	}
	return nil
}

// TestLowDiskRefusesWrites: an instance whose sidecar reports low disk is
// read-only for writes through the router (53100); reads go on.
func TestLowDiskRefusesWrites(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base, err := os.MkdirTemp("", "dev-lowdisk-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	os.Chmod(base, 0o755)
	c, err := dev.Start(ctx, dev.Config{
		DataDir:      filepath.Join(base, "data"),
		Shards:       1,
		NoReplicas:   true,
		BasePort:     dev.TestPort(26433),
		EtcdPort:     -1,
		RouterPort:   -1,
		LowDiskBytes: 1 << 62, // every disk is low
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop(context.Background())
	conn, err := pgx.Connect(ctx, "postgres://postgres:postgres@"+c.Info().Router+"/postgres?sslmode=disable")
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var one int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&one); err != nil || one != 1 {
		t.Fatalf("a read on a shard low on disk: %v", err)
	}
	var pe *pgconn.PgError
	deadline := time.Now().Add(10 * time.Second)
	for {
		_, err = conn.Exec(ctx, "CREATE TABLE filler (x int)")
		if errors.As(err, &pe) && pe.Code == "53100" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a write on a shard low on disk: %v, want 53100", err)
		}
		// The router learns of the low disk from the health stream.
		conn.Exec(ctx, "DROP TABLE IF EXISTS filler")
		time.Sleep(100 * time.Millisecond)
	}
}
