package activities_test

import (
	"context"
	"log"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/dev/testwatch"
	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/sidecar"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

const (
	secret = "activities-test-secret-0123"
	shard  = "s1"
)

// The package's tests share one cluster: an embedded etcd and shard s1 of
// three real Postgres instances under pgmanager, each with a sidecar
// registered in etcd: s1-a (zone z1, the first primary), s1-b (z1) and
// s1-c (z2). Tests that move the primary leave the shard healthy, and
// every test finds the current primary in ShardState or discovery.
var (
	st    *store.Store
	acts  *activities.Activities
	nodes = map[string]*pgmanager.Instance{}
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	defer testwatch.Start()()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base, err := os.MkdirTemp("", "activities-test-")
	if err != nil {
		log.Print(err)
		return 1
	}
	defer os.RemoveAll(base)
	// The postgres OS user must traverse it when the tests run as root.
	if err := os.Chmod(base, 0o755); err != nil {
		log.Print(err)
		return 1
	}
	etcd, err := etcdembed.StartServer()
	if err != nil {
		log.Print(err)
		return 1
	}
	defer etcd.Stop()
	if st, err = store.Dial(ctx, etcd.Endpoints, "test"); err != nil {
		log.Print(err)
		return 1
	}
	defer st.Close()

	var sidecars []*sidecar.Server
	defer func() {
		for _, sc := range sidecars {
			sc.Stop(context.Background())
		}
		for _, n := range nodes {
			n.Close(context.Background())
		}
	}()
	zones := []struct{ id, zone string }{{"s1-a", "z1"}, {"s1-b", "z1"}, {"s1-c", "z2"}}
	for i, z := range zones {
		inst, err := pgmanager.New(pgmanager.Config{
			InstanceID: z.id,
			Dir:        filepath.Join(base, z.id),
			Port:       freePort(),
			Settings:   map[string]string{"max_connections": "30"},
		})
		if err != nil {
			log.Print(err)
			return 1
		}
		nodes[z.id] = inst
		if i == 0 {
			err = inst.InitPrimary(ctx)
		} else {
			err = inst.InitReplica(ctx, nodes["s1-a"].Endpoint())
		}
		if err == nil {
			err = inst.Start(ctx)
		}
		if err != nil {
			log.Printf("%s: %v", z.id, err)
			return 1
		}
		sc, err := sidecar.New(sidecar.Config{
			ShardUID:          shard,
			InstanceID:        z.id,
			Zone:              z.zone,
			ListenAddr:        "127.0.0.1:0",
			PostgresAddr:      net.JoinHostPort("127.0.0.1", strconv.Itoa(inst.Port())),
			Secret:            secret,
			Manager:           inst,
			Store:             st,
			HealthInterval:    200 * time.Millisecond,
			HeartbeatInterval: time.Second,
		})
		if err == nil {
			err = sc.Start(ctx)
		}
		if err != nil {
			log.Printf("%s sidecar: %v", z.id, err)
			return 1
		}
		sidecars = append(sidecars, sc)
	}
	if acts, err = activities.New(activities.Config{Store: st, Secret: secret}); err != nil {
		log.Print(err)
		return 1
	}
	defer acts.Close()
	return m.Run()
}

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// query runs sql on an instance over its private socket and returns the
// single value it answers.
func query(t *testing.T, id, sql string) (string, error) {
	t.Helper()
	ctx := testCtx(t)
	c, err := pgx.Connect(ctx, nodes[id].ConnConfig("", ""))
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	var v string
	err = c.QueryRow(ctx, sql).Scan(&v)
	return v, err
}

// tryExec runs statements on an instance over its private socket.
func tryExec(t *testing.T, id, sql string) error {
	t.Helper()
	ctx := testCtx(t)
	c, err := pgx.Connect(ctx, nodes[id].ConnConfig("", ""))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql)
	return err
}

func exec(t *testing.T, id, sql string) {
	t.Helper()
	if err := tryExec(t, id, sql); err != nil {
		t.Fatalf("%s on %s: %v", sql, id, err)
	}
}

// eventually polls cond until it returns nil or the time is up.
func eventually(t *testing.T, within time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %v", what, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// currentPrimary is the recorded primary, or s1-a before any is recorded.
func currentPrimary(t *testing.T) string {
	t.Helper()
	s, err := st.GetShardState(testCtx(t), shard)
	if err != nil {
		t.Fatal(err)
	}
	if s.Primary == "" {
		return "s1-a"
	}
	return s.Primary
}
