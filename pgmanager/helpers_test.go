package pgmanager

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// baseDir is the one place tests create instance directories: a fresh
// temporary directory, made traversable (MkdirTemp creates it 0700) so
// that, when the tests run as root, the postgres OS user can reach the
// instance directories inside it.
func baseDir(t *testing.T) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "pgm")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}

// freePort returns a TCP port nobody listens on right now.
func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// testLogger sends pgmanager's log to t.Log until the test is over
// (t.Log after that panics, and supervisor goroutines may still log).
func testLogger(t *testing.T) *slog.Logger {
	w := &testWriter{t: t}
	t.Cleanup(func() { w.mu.Lock(); w.done = true; w.mu.Unlock() })
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

type testWriter struct {
	mu   sync.Mutex
	t    *testing.T
	done bool
}

func (w *testWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if !w.done {
		w.t.Log(strings.TrimRight(string(p), "\n"))
	}
	return len(p), nil
}

// newInstance makes an Instance in base/id on a free port, closed at the
// end of the test, after which no postgres process may remain on its data
// directory.
func newInstance(t *testing.T, base, id string, mod func(*Config)) *Instance {
	t.Helper()
	cfg := Config{
		InstanceID: id,
		Dir:        filepath.Join(base, id),
		Port:       freePort(t),
		Logger:     testLogger(t),
	}
	if mod != nil {
		mod(&cfg)
	}
	inst, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	closeAtEnd(t, inst)
	return inst
}

func closeAtEnd(t *testing.T, inst *Instance) {
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if t.Failed() {
			if b, err := os.ReadFile(inst.LogPath()); err == nil {
				t.Logf("%s postgres.log ends with:\n%s", inst.Config().InstanceID, lastLines(b, 60))
			}
		}
		if err := inst.Close(ctx); err != nil {
			t.Errorf("Close %s: %v", inst.Config().InstanceID, err)
		}
		if procs := postgresProcesses(inst.DataDir()); len(procs) > 0 {
			t.Errorf("after Close, postgres processes remain on %s: %v", inst.DataDir(), procs)
		}
	})
}

// startPrimary is a new, initialized and started primary.
func startPrimary(t *testing.T, id string, mod func(*Config)) *Instance {
	t.Helper()
	inst := newInstance(t, baseDir(t), id, mod)
	ctx := testCtx(t)
	if err := inst.InitPrimary(ctx); err != nil {
		t.Fatal(err)
	}
	if err := inst.Start(ctx); err != nil {
		t.Fatal(err)
	}
	return inst
}

// testCtx bounds one step of a test.
func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// postgresProcesses lists postgres processes that belong to dataDir: the
// postmaster names it on its command line, and every postgres process
// works in it.
func postgresProcesses(dataDir string) []string {
	var out []string
	for _, p := range listProcs() {
		if p.state == 'Z' {
			continue
		}
		dir := "/proc/" + strconv.Itoa(p.pid)
		cmdline, _ := os.ReadFile(dir + "/cmdline")
		cwd, _ := os.Readlink(dir + "/cwd")
		exe, _ := os.Readlink(dir + "/exe")
		isPostgres := strings.Contains(string(cmdline), "postgres") || strings.Contains(exe, "postgres")
		if isPostgres && (strings.Contains(string(cmdline), dataDir) || cwd == dataDir) {
			out = append(out, fmt.Sprintf("%d %q", p.pid, strings.ReplaceAll(string(cmdline), "\x00", " ")))
		}
	}
	return out
}

// dial opens a session over the unix socket, as the sidecar would.
func dial(t *testing.T, inst *Instance) *pgx.Conn {
	t.Helper()
	c, err := pgx.Connect(testCtx(t), inst.ConnConfig("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

// dialTCP opens a session over TCP with a password.
func dialTCP(ctx context.Context, inst *Instance, password string) (*pgx.Conn, error) {
	cfg, err := pgx.ParseConfig(fmt.Sprintf("host=127.0.0.1 port=%d user=postgres dbname=postgres sslmode=disable", inst.Port()))
	if err != nil {
		return nil, err
	}
	cfg.Password = password
	return pgx.ConnectConfig(ctx, cfg)
}

// execSQL runs statements in a fresh session and fails the test on error.
func execSQL(t *testing.T, inst *Instance, sql string) {
	t.Helper()
	if err := tryExec(inst, sql); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

func tryExec(inst *Instance, sql string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, inst.ConnConfig("postgres", "postgres"))
	if err != nil {
		return err
	}
	defer c.Close(ctx)
	_, err = c.Exec(ctx, sql)
	return err
}

// query returns the single text value of sql, run in a fresh session.
func query(inst *Instance, sql string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, err := pgx.Connect(ctx, inst.ConnConfig("postgres", "postgres"))
	if err != nil {
		return "", err
	}
	defer c.Close(ctx)
	var s *string
	if err := c.QueryRow(ctx, sql).Scan(&s); err != nil {
		return "", err
	}
	if s == nil {
		return "<null>", nil
	}
	return *s, nil
}

func mustQuery(t *testing.T, inst *Instance, sql string) string {
	t.Helper()
	s, err := query(inst, sql)
	if err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return s
}

// eventually retries f until it returns nil or timeout passes.
func eventually(t *testing.T, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// wantQuery waits until sql returns want on inst.
func wantQuery(t *testing.T, inst *Instance, timeout time.Duration, sql, want string) {
	t.Helper()
	eventually(t, timeout, fmt.Sprintf("%s on %s", sql, inst.Config().InstanceID), func() error {
		got, err := query(inst, sql)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("got %q, want %q", got, want)
		}
		return nil
	})
}

func wantSQLState(t *testing.T, err error, code string) {
	t.Helper()
	if err == nil {
		t.Fatalf("no error, want SQLSTATE %s", code)
	}
	if got := sqlState(err); got != code {
		t.Fatalf("error %v: SQLSTATE %q, want %s", err, got, code)
	}
}
