package sidecar_test

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"io"
	"log"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/dev/testwatch"
	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

const secret = "test-secret-0123456789"

// shared is the Postgres instance most tests use; each test runs its own
// sidecar in front of it, so pool settings differ per test.
var shared *pgmanager.Instance

var baseDir string

func TestMain(m *testing.M) {
	os.Exit(runTests(m))
}

func runTests(m *testing.M) int {
	defer testwatch.Start()()
	flag.Parse()
	if f := flag.Lookup("test.fuzz"); f != nil && f.Value.String() != "" {
		// Fuzzing needs no Postgres, and its worker processes must not
		// each start one.
		return m.Run()
	}
	var err error
	baseDir, err = os.MkdirTemp("", "sidecar-test-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(baseDir)
	os.Chmod(baseDir, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	shared, err = startInstance(ctx, "shared")
	if err != nil {
		log.Print(err)
		return 1
	}
	defer shared.Close(context.Background())
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

func startInstance(ctx context.Context, id string) (*pgmanager.Instance, error) {
	inst, err := pgmanager.New(pgmanager.Config{
		InstanceID: id,
		Dir:        filepath.Join(baseDir, id),
		Port:       freePort(),
		Settings:   map[string]string{"max_connections": "50"},
	})
	if err != nil {
		return nil, err
	}
	if err := inst.InitPrimary(ctx); err != nil {
		return nil, err
	}
	if err := inst.Start(ctx); err != nil {
		return nil, err
	}
	return inst, nil
}

// startSidecar runs a sidecar in front of inst for one test.
func startSidecar(t *testing.T, inst *pgmanager.Instance, pool sidecar.PoolConfig) *sidecar.Server {
	t.Helper()
	return startSidecarAs(t, inst, inst.Config().InstanceID, pool)
}

// startSidecarAs is startSidecar with the sidecar calling itself
// instanceID, so that in-process dials by that name reach this one.
func startSidecarAs(t testing.TB, inst *pgmanager.Instance, instanceID string, pool sidecar.PoolConfig) *sidecar.Server {
	t.Helper()
	if pool == (sidecar.PoolConfig{}) {
		pool = sidecar.DefaultPoolConfig
	}
	srv, err := sidecar.New(sidecar.Config{
		ShardUID:          "shard-0",
		InstanceID:        instanceID,
		ListenAddr:        "127.0.0.1:0",
		SessionListenAddr: "127.0.0.1:0",
		SessionSocket:     filepath.Join(t.TempDir(), "sidecar.sock"),
		Secret:            secret,
		Manager:           inst,
		Pool:              pool,
		HealthInterval:    200 * time.Millisecond,
		HeartbeatInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Stop(context.Background()) })
	return srv
}

func dial(t *testing.T, srv *sidecar.Server) *sidecar.Client {
	t.Helper()
	c, err := sidecar.Dial(srv.Addr(), sidecar.DialOptions{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func open(t *testing.T, c *sidecar.Client) *sidecar.ClientSession {
	t.Helper()
	s, err := c.OpenSession(context.Background(), "postgres", "postgres")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// encode concatenates frontend messages.
func encode(t testing.TB, msgs ...pgproto3.FrontendMessage) []byte {
	t.Helper()
	var out []byte
	for _, m := range msgs {
		var err error
		if out, err = m.Encode(out); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// answer is what a batch's raw answer decodes to.
type answer struct {
	rows     [][]string
	tags     []string
	errors   []string // SQLSTATEs
	messages []string
	types    []byte // message types in order
	chunks   int
	result   sidecar.Result
}

func (a answer) String() string {
	return fmt.Sprintf("rows=%v tags=%v errors=%v %v types=%q", a.rows, a.tags, a.errors, a.messages, a.types)
}

func (a answer) one(t *testing.T) string {
	t.Helper()
	if len(a.rows) != 1 || len(a.rows[0]) != 1 {
		t.Fatalf("want one value, got %v", a)
	}
	return a.rows[0][0]
}

// run sends a batch and decodes the answer with pgx's protocol decoder.
func run(t *testing.T, s *sidecar.ClientSession, batch *pb.Batch) answer {
	t.Helper()
	var raw bytes.Buffer
	var a answer
	res, err := s.Run(batch, func(chunk []byte) error {
		a.chunks++
		raw.Write(chunk)
		return nil
	})
	if err != nil {
		t.Fatalf("batch: %v", err)
	}
	a.result = res
	fe := pgproto3.NewFrontend(bytes.NewReader(raw.Bytes()), io.Discard)
	for {
		msg, err := fe.Receive()
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			break
		}
		if err != nil {
			t.Fatalf("decoding the answer: %v", err)
		}
		switch m := msg.(type) {
		case *pgproto3.DataRow:
			row := make([]string, len(m.Values))
			for i, v := range m.Values {
				row[i] = string(v)
			}
			a.rows = append(a.rows, row)
			a.types = append(a.types, 'D')
		case *pgproto3.CommandComplete:
			a.tags = append(a.tags, string(m.CommandTag))
			a.types = append(a.types, 'C')
		case *pgproto3.ErrorResponse:
			a.errors = append(a.errors, m.Code)
			a.messages = append(a.messages, m.Message)
			a.types = append(a.types, 'E')
		case *pgproto3.ReadyForQuery:
			a.types = append(a.types, 'Z')
		case *pgproto3.ParseComplete:
			a.types = append(a.types, '1')
		case *pgproto3.BindComplete:
			a.types = append(a.types, '2')
		case *pgproto3.RowDescription:
			a.types = append(a.types, 'T')
		case *pgproto3.CopyInResponse:
			a.types = append(a.types, 'G')
		default:
			a.types = append(a.types, '?')
		}
	}
	if !res.CopyIn && (len(a.types) == 0 || a.types[len(a.types)-1] != 'Z') {
		t.Fatalf("answer does not end with ReadyForQuery: %v", a)
	}
	return a
}

// query runs one simple query in mode.
func query(t *testing.T, s *sidecar.ClientSession, mode pb.Mode, sql string) answer {
	t.Helper()
	return run(t, s, &pb.Batch{Mode: mode, Frontend: encode(t, &pgproto3.Query{String: sql})})
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
