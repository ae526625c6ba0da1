package actions

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
)

// One real Postgres under pgmanager serves every shard of these tests: a
// shard is a database of it, reached by a connection of its own, as the
// replicator's tests do.
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
		if pgBase, pgErr = os.MkdirTemp("", "replicator-actions-test-"); pgErr != nil {
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
			InstanceID: "replicator-actions-test",
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

// shardDB names the database that stands for a shard in a test.
func shardDB(prefix, shard string) string { return prefix + "_" + shard }

// createShards makes a fresh database per shard, each with ddl run in it,
// and returns a Connector that reaches them.
func createShards(t *testing.T, prefix, ddl string, shards ...string) Connector {
	t.Helper()
	inst := testPostgres(t)
	admin := connect(t, inst.ConnConfig("postgres", ""))
	for _, s := range shards {
		ident := pgx.Identifier{shardDB(prefix, s)}.Sanitize()
		mustExec(t, admin, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)")
		mustExec(t, admin, "CREATE DATABASE "+ident)
		mustExec(t, connect(t, inst.ConnConfig(shardDB(prefix, s), "")), ddl)
	}
	return ConnectorFunc(func(ctx context.Context, shard, database string) (string, error) {
		return inst.ConnConfig(shardDB(prefix, shard), ""), nil
	})
}

func shardConn(t *testing.T, prefix, shard string) *pgx.Conn {
	return connect(t, testPostgres(t).ConnConfig(shardDB(prefix, shard), ""))
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

func count(t *testing.T, conn *pgx.Conn, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	if err := conn.QueryRow(testCtx(t), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%.60s: %v", sql, err)
	}
	return n
}
