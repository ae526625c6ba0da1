package onlineddl

import (
	"context"
	"log"
	"net"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/dev/testwatch"
	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// One real Postgres under pgmanager serves every shard of these tests: a
// shard is a database of it (named database_shard), as the Replicator's
// tests do; the topology is in an embedded etcd.
var (
	pgOnce sync.Once
	pgInst *pgmanager.Instance
	pgErr  error
	pgBase string
)

func TestMain(m *testing.M) {
	testwatch.Start()
	code := m.Run()
	if pgInst != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		if err := pgInst.Close(ctx); err != nil {
			log.Printf("stop test postgres: %v", err)
		}
		cancel()
	}
	if pgBase != "" {
		os.RemoveAll(pgBase)
	}
	os.Exit(code)
}

func testPostgres(t testing.TB) *pgmanager.Instance {
	t.Helper()
	pgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if pgBase, pgErr = os.MkdirTemp("", "onlineddl-test-"); pgErr != nil {
			return
		}
		if pgErr = os.Chmod(pgBase, 0o755); pgErr != nil {
			return
		}
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if pgErr = err; err != nil {
			return
		}
		port := l.Addr().(*net.TCPAddr).Port
		l.Close()
		var inst *pgmanager.Instance
		inst, pgErr = pgmanager.New(pgmanager.Config{
			InstanceID: "onlineddl-test",
			Dir:        filepath.Join(pgBase, "pg"),
			Port:       port,
			Settings:   map[string]string{"max_connections": "60", "fsync": "off"},
		})
		if pgErr != nil {
			return
		}
		pgInst = inst
		if pgErr = inst.InitPrimary(ctx); pgErr == nil {
			pgErr = inst.Start(ctx)
		}
	})
	if pgErr != nil {
		t.Fatalf("test postgres: %v", pgErr)
	}
	return pgInst
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// testShards are the shards of the test topology: s0 alone in the
// authoritative group, s1 and s2 in a sharded group.
var testShards = []string{"s0", "s1", "s2"}

const testTopology = `{"authoritative_shard_group": "main",
	"shard_indexes": {"id_xxhash": {"type": "xxhash", "columns": ["id"]}},
	"shard_groups": [
		{"uid": "main", "key_ranges": [{"shard_uid": "s0"}]},
		{"uid": "data", "default_shard_index": "id_xxhash",
		 "key_ranges": [{"shard_uid": "s1", "end": "80"}, {"shard_uid": "s2", "start": "80"}]}]}`

// newActivities makes a fresh database per shard, named database_shard,
// each with ddl run in it, stores the test topology in a new etcd, and
// returns activities that reach them.
func newActivities(t *testing.T, database, ddl string) *Activities {
	t.Helper()
	ctx := testCtx(t)
	inst := testPostgres(t)
	admin := connect(t, inst.ConnConfig("postgres", ""))
	for _, s := range testShards {
		ident := pgx.Identifier{database + "_" + s}.Sanitize()
		mustExec(t, admin, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
		mustExec(t, admin, "CREATE DATABASE "+ident)
		mustExec(t, shardConn(t, database, s), ddl)
	}
	st, err := store.Dial(ctx, etcdembed.Start(t), "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	top, err := topo.Parse([]byte(testTopology))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyTopology(ctx, top, store.ApplyOptions{ExpectedRevision: store.AnyRevision}); err != nil {
		t.Fatal(err)
	}
	return &Activities{Store: st, Conn: connectorFunc(func(ctx context.Context, shard, db string) (string, error) {
		return inst.ConnConfig(db+"_"+shard, ""), nil
	})}
}

type connectorFunc func(ctx context.Context, shard, database string) (string, error)

func (f connectorFunc) ConnString(ctx context.Context, shard, database string) (string, error) {
	return f(ctx, shard, database)
}

func shardConn(t *testing.T, database, shard string) *pgx.Conn {
	return connect(t, testPostgres(t).ConnConfig(database+"_"+shard, ""))
}

func connect(t testing.TB, url string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(testCtx(t), url)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func mustExec(t testing.TB, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(testCtx(t), sql, args...); err != nil {
		t.Fatalf("%.60s: %v", sql, err)
	}
}
