package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tesseradb/tessera/dev"
	"github.com/tesseradb/tessera/topo/store"
)

// syncBuffer is a bytes.Buffer safe to read while a command writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDevStatusAndShardCreate runs `tessera dev` in-process (without the
// Temporal server, which only package main links), then `status` and
// `shard create` against it with no flags but --data, then stops it as
// Ctrl-C would.
func TestDevStatusAndShardCreate(t *testing.T) {
	base, err := os.MkdirTemp("", "cli-dev-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(base)
	os.Chmod(base, 0o755)
	data := filepath.Join(base, "data")

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var out, errOut syncBuffer
	exit := make(chan int, 1)
	go func() {
		exit <- RunContext(ctx, []string{"dev", "--data", data, "--shards", "1", "--replicas", "1", "--base-port", strconv.Itoa(dev.TestPort(26433)), "--etcd-port", strconv.Itoa(dev.TestPort(23791)), "--router-port", "-1", "--print-json"}, &out, &errOut, Options{})
	}()
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(out.String(), "\n") {
		select {
		case code := <-exit:
			t.Fatalf("tessera dev exited %d: %s", code, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("tessera dev did not come up: %s", errOut.String())
		}
		time.Sleep(100 * time.Millisecond)
	}
	var info dev.Info
	if err := json.Unmarshal([]byte(out.String()), &info); err != nil || len(info.Shards) != 1 {
		t.Fatalf("--print-json: %q %v", out.String(), err)
	}
	if !strings.Contains(errOut.String(), "shard-0") || !strings.Contains(errOut.String(), "cluster.json") {
		t.Errorf("summary lacks the addresses:\n%s", errOut.String())
	}
	checkDevMetrics(t, errOut.String())

	stdout, stderr, code := tessera(t, "status", "--data", data, "--json")
	var report statusReport
	if code != 0 || json.Unmarshal([]byte(stdout), &report) != nil || len(report.Instances) != 2 {
		t.Fatalf("status: exit %d, %q %q", code, stdout, stderr)
	}
	rows := report.Instances
	if r := rows[0]; r.Instance != "shard-0-0" || r.Role != "primary" || !r.Writable || r.CurrentLSN == "" {
		t.Errorf("primary row: %+v", r)
	}
	if r := rows[1]; r.Role != "replica" || !r.Serving || r.Writable || r.ReceiveLSN == "" {
		t.Errorf("replica row: %+v", r)
	}
	stdout, _, code = tessera(t, "status", "--data", data)
	if code != 0 || !strings.Contains(stdout, "shard-0-1") || !strings.Contains(stdout, "writable") {
		t.Errorf("status table: exit %d\n%s", code, stdout)
	}
	// What the control plane records per shard follows the instances.
	st, err := store.Dial(context.Background(), info.Etcd, info.Cluster)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if _, err := st.UpdateShardState(context.Background(), "shard-0", func(s *store.ShardState) error {
		s.Primary, s.Term, s.Durability = "shard-0-0", 3, store.DurabilityAsync
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	stdout, _, _ = tessera(t, "status", "--data", data)
	if !strings.Contains(stdout, "RECORDED PRIMARY") || !regexp.MustCompile(`shard-0\s+shard-0-0\s+3\s+async\s+-`).MatchString(stdout) {
		t.Errorf("status table without the recorded shard state:\n%s", stdout)
	}
	stdout, _, _ = tessera(t, "status", "--data", data, "--json")
	report = statusReport{}
	if err := json.Unmarshal([]byte(stdout), &report); err != nil || len(report.Shards) != 1 {
		t.Fatalf("status --json: %v\n%s", err, stdout)
	}
	if sh := report.Shards[0]; sh.Shard != "shard-0" || sh.Primary != "shard-0-0" || sh.Term != 3 || sh.Durability != store.DurabilityAsync {
		t.Errorf("status --json shard state: %+v", sh)
	}

	stdout, stderr, code = tessera(t, "shard", "create", "shard-9", "--replicas", "0", "--data", data)
	if code != 0 || !strings.Contains(stdout, `"uid":"shard-9"`) {
		t.Fatalf("shard create: exit %d, %q %q", code, stdout, stderr)
	}
	if stdout, _, _ := tessera(t, "status", "--data", data, "--json"); strings.Count(stdout, `"instance"`) != 3 {
		t.Errorf("status after shard create:\n%s", stdout)
	}
	// topo commands find the dev cluster's etcd by themselves too.
	if stdout, _, code := tessera(t, "topo", "get", "--data", data); code != 0 || !strings.Contains(stdout, `"shard-0"`) {
		t.Errorf("topo get: exit %d %q", code, stdout)
	}

	cancel()
	select {
	case code := <-exit:
		if code != 0 {
			t.Fatalf("tessera dev exited %d: %s", code, errOut.String())
		}
	case <-time.After(time.Minute):
		t.Fatal("tessera dev did not stop")
	}
	if left := postgresProcesses(data); len(left) > 0 {
		t.Fatalf("processes left:\n%s", strings.Join(left, "\n"))
	}
}

func postgresProcesses(dir string) []string {
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

// checkDevMetrics scrapes the /metrics address tessera dev printed: the
// router's and the sidecar's metrics are there (this cluster runs no
// Temporal, so no worker).
func checkDevMetrics(t *testing.T, summary string) {
	t.Helper()
	m := regexp.MustCompile(`metrics +(http://\S+/metrics)`).FindStringSubmatch(summary)
	if m == nil {
		t.Fatalf("no metrics address in the summary:\n%s", summary)
	}
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, want := range []string{"tessera_router_sessions ", `tessera_sidecar_serving{instance="shard-0`} {
		if !strings.Contains(string(body), want) {
			t.Errorf("%s has no %q", m[1], want)
		}
	}
}
