package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/dev"
	"github.com/tesseradb/tessera/dev/temporal"
	"github.com/tesseradb/tessera/dev/testwatch"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/worker"
	"github.com/tesseradb/tessera/workflows"
)

// One real Temporal server and one dev cluster for the package: shard-0
// with a primary and two replicas, a router, etcd. The high-availability
// tests run one after another because each moves shard-0's primary; the
// embedded server's own tests (temporal_test.go) start servers of their
// own and run in parallel after them.
var (
	temporalSrv *temporal.Server
	cluster     *dev.Cluster
	tc          client.Client
)

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	flag.Parse()
	if code, ok := runHostProcess(); ok {
		return code
	}
	if os.Getenv(resumeDBEnv) != "" {
		// The child process of TestResumeFromDBFile needs no cluster.
		return m.Run()
	}
	if cfg := os.Getenv(workerEnv); cfg != "" {
		return runWorkerProcess(cfg)
	}
	if spec := os.Getenv(replicatorEnv); spec != "" {
		return runReplicatorProcess(spec)
	}
	if spec := os.Getenv(replicatorWorkerEnv); spec != "" {
		return runReplicatorWorkerProcess(spec)
	}
	defer testwatch.Start()()
	base, err := os.MkdirTemp("", "e2e-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(base)
	os.Chmod(base, 0o755)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	temporalSrv, err = temporal.Start(ctx, temporal.Config{FrontendPort: -1, UIPort: -1, DisableUI: true, SearchAttributes: workflows.SearchAttributes})
	if err != nil {
		log.Print(err)
		return 1
	}
	defer temporalSrv.Stop()
	cluster, err = dev.Start(ctx, dev.Config{
		DataDir:    filepath.Join(base, "data"),
		Shards:     1,
		Replicas:   2,
		BasePort:   dev.TestPort(29433),
		EtcdPort:   -1,
		RouterPort: -1,
		Logger:     slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})),
	})
	if err != nil {
		log.Print(err)
		return 1
	}
	defer cluster.Stop(context.Background())
	tc, err = client.Dial(client.Options{HostPort: temporalSrv.FrontendAddr(), Logger: sdklog.NewStructuredLogger(slog.New(slog.DiscardHandler))})
	if err != nil {
		log.Print(err)
		return 1
	}
	defer tc.Close()
	return m.Run()
}

// startWorker runs a Tessera worker, with an admin when admin is set,
// until the test ends or stop is called.
func startWorker(t *testing.T, id string, admin bool) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	w, err := worker.Start(ctx, worker.Config{
		TemporalAddr:  temporalSrv.FrontendAddr(),
		EtcdEndpoints: cluster.Info().Etcd,
		Cluster:       cluster.Info().Cluster,
		Secret:        cluster.Secret(),
		ID:            id,
		Admin:         admin,
	})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	stop = func() {
		if !stopped {
			stopped = true
			w.Stop(context.Background())
		}
	}
	t.Cleanup(stop)
	return stop
}

// workerEnv, when set to a JSON workerSpec, makes the test binary run
// that worker until it is killed: a worker in a process of its own.
const workerEnv = "TESSERA_E2E_WORKER"

// workerSpec is what a worker process needs to know.
type workerSpec struct {
	TemporalAddr  string
	EtcdEndpoints []string
	Cluster       string
	Secret        string
	ID            string
	// ReplicatorPasswordFile: as worker.Config's.
	ReplicatorPasswordFile string
	// StopAtFile, when set, names a file holding an activity type: the
	// worker stops when an activity of that type has done its work,
	// before it reports it (stopAtStep).
	StopAtFile string
}

func runWorkerProcess(cfgJSON string) int {
	var spec workerSpec
	if err := json.Unmarshal([]byte(cfgJSON), &spec); err != nil {
		log.Print(err)
		return 2
	}
	cfg := worker.Config{TemporalAddr: spec.TemporalAddr, EtcdEndpoints: spec.EtcdEndpoints, Cluster: spec.Cluster, Secret: spec.Secret, ID: spec.ID,
		ReplicatorPasswordFile: spec.ReplicatorPasswordFile}
	if spec.StopAtFile != "" {
		cfg.Interceptors = []interceptor.WorkerInterceptor{&stopAtStep{file: spec.StopAtFile}}
	}
	if err := worker.Run(context.Background(), cfg); err != nil {
		log.Print(err)
		return 1
	}
	return 0
}

// workerProcess starts a worker without an admin in a child process, and
// waits until it has registered.
func workerProcess(t *testing.T, id string) *exec.Cmd {
	t.Helper()
	cmd, _ := stoppingWorkerProcess(t, id, "")
	return cmd
}

// stoppingWorkerProcess is workerProcess, with a worker that stops
// inside the first activity of type step (stopAtStep) unless step is
// empty; the channel receives step's name when it has.
func stoppingWorkerProcess(t *testing.T, id, step string) (*exec.Cmd, <-chan string) {
	t.Helper()
	spec := workerSpec{
		TemporalAddr:  temporalSrv.FrontendAddr(),
		EtcdEndpoints: cluster.Info().Etcd,
		Cluster:       cluster.Info().Cluster,
		Secret:        cluster.Secret(),
		ID:            id,
	}
	if step != "" {
		spec.StopAtFile = filepath.Join(t.TempDir(), "stop-at")
		if err := os.WriteFile(spec.StopAtFile, []byte(step), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cfg, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), workerEnv+"="+string(cfg))
	cmd.Stderr = os.Stderr
	stopped := make(chan string, 1)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if at, ok := strings.CutPrefix(sc.Text(), "stopped at "); ok {
				select {
				case stopped <- at:
				default:
				}
			}
		}
	}()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	eventually(t, 30*time.Second, "the worker process registers", func() error {
		recs, err := cluster.Store().ListRecords(context.Background(), store.KindWorker)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.ID == id {
				return nil
			}
		}
		return fmt.Errorf("no worker %s yet", id)
	})
	return cmd, stopped
}

func routerConn(t *testing.T, addr string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@%s/postgres?sslmode=disable", addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func eventually(t *testing.T, within time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, within, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// storeActivities are the general activities for a test's own worker
// whose shards are databases of one Postgres, with no sidecars: what the
// movement workflows need of them, the operations' records in etcd
// (BeginOperation, EndOperation), uses the store alone, and the secret
// sidecars would ask for is never sent.
func storeActivities(st *store.Store) *activities.Activities {
	a, err := activities.New(activities.Config{Store: st, Secret: "no sidecars in this test"})
	if err != nil {
		log.Fatal(err)
	}
	return a
}
