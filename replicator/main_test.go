package replicator

import (
	"context"
	"fmt"
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

// The tests that need Postgres share one real instance under pgmanager,
// started by the first of them and stopped after the last; each test works
// in databases of its own. Source and targets are databases of that one
// instance: the copy reaches each by its own connection, as it would reach
// separate servers, and the machine runs one postmaster instead of three.
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

// testPostgres returns the shared instance, starting it on first use.
func testPostgres(t testing.TB) *pgmanager.Instance {
	t.Helper()
	pgOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		if pgBase, pgErr = os.MkdirTemp("", "replicator-test-"); pgErr != nil {
			return
		}
		// The postgres OS user must traverse it when the tests run as root.
		if pgErr = os.Chmod(pgBase, 0o755); pgErr != nil {
			return
		}
		var inst *pgmanager.Instance
		inst, pgErr = pgmanager.New(pgmanager.Config{
			InstanceID: "replicator-test",
			Dir:        filepath.Join(pgBase, "pg"),
			Port:       freePort(),
			Settings:   map[string]string{"max_connections": "40", "fsync": "off"},
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

func freePort() int {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// createDatabase makes a fresh database and returns its connection string.
func createDatabase(t testing.TB, name string) string {
	t.Helper()
	inst := testPostgres(t)
	ctx := testCtx(t)
	admin := connect(t, inst.ConnConfig("postgres", ""))
	ident := pgx.Identifier{name}.Sanitize()
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident+" WITH (FORCE)"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident); err != nil {
		t.Fatal(err)
	}
	return inst.ConnConfig(name, "")
}

// connect opens a connection closed at the end of the test.
func connect(t testing.TB, connString string) *pgx.Conn {
	t.Helper()
	conn, err := pgx.Connect(testCtx(t), connString)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func mustExec(t testing.TB, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	if _, err := conn.Exec(testCtx(t), sql, args...); err != nil {
		t.Fatalf("%s: %v", firstLine(sql), err)
	}
}

func firstLine(s string) string {
	for i, c := range s {
		if c == '\n' {
			return fmt.Sprintf("%s...", s[:i])
		}
	}
	return s
}
