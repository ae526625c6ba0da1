package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/tlsfiles"
	"github.com/tesseradb/tessera/tlsfiles/tlstest"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// freeAddr returns a loopback host:port nobody listens on right now.
func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// runningInstance is one `tessera instance` run in-process.
type runningInstance struct {
	id     string
	cancel context.CancelFunc
	exit   chan int
	stderr *syncBuffer
}

func startInstanceRun(t *testing.T, id string, args ...string) *runningInstance {
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningInstance{id: id, cancel: cancel, exit: make(chan int, 1), stderr: &syncBuffer{}}
	go func() {
		r.exit <- RunContext(ctx, append([]string{"instance", "--id", id}, args...), &syncBuffer{}, r.stderr, Options{})
	}()
	t.Cleanup(func() { r.stop(t) })
	return r
}

// stop stops the run as SIGTERM would and checks that it ended cleanly.
func (r *runningInstance) stop(t *testing.T) {
	t.Helper()
	if r.cancel == nil {
		return
	}
	r.cancel()
	r.cancel = nil
	select {
	case code := <-r.exit:
		if code != 0 {
			t.Errorf("instance %s exited %d:\n%s", r.id, code, r.stderr)
		}
	case <-time.After(2 * time.Minute):
		t.Errorf("instance %s did not stop:\n%s", r.id, r.stderr)
	}
}

// waitRecord waits for the sidecar record of id in the given role.
func waitRecord(t *testing.T, s *store.Store, r *runningInstance, role string) store.Record {
	t.Helper()
	deadline := time.Now().Add(3 * time.Minute)
	for {
		select {
		case code := <-r.exit:
			r.cancel = nil
			t.Fatalf("instance %s exited %d before registering:\n%s", r.id, code, r.stderr)
		default:
		}
		recs, err := s.ListRecords(context.Background(), store.KindSidecar)
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range recs {
			switch {
			case rec.ID == r.id && rec.Role == role:
				return rec
			case rec.ID == r.id && rec.Role != "":
				t.Fatalf("instance %s registered as %s, want %s: %+v", r.id, rec.Role, role, rec)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("instance %s is not registered as %s: %+v\n%s", r.id, role, recs, r.stderr)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// TestInstancesFormAShard runs two `tessera instance` for one shard
// against an embedded etcd: the first creates the database and registers
// as primary, the second base-backups from it and streams as a replica.
// The second's sidecar speaks TLS with client certificates (its instance
// flags), so a plaintext client is refused. Both stop cleanly.
func TestInstancesFormAShard(t *testing.T) {
	clearInstanceEnv(t)
	endpoints := etcdembed.Start(t)
	base, err := os.MkdirTemp("", "cli-inst-")
	if err != nil {
		t.Fatal(err)
	}
	// A cleanup, not a defer: it must run after the instances' cleanups
	// have stopped their Postgres, which cleanups do last in first out.
	t.Cleanup(func() { os.RemoveAll(base) })
	// The postgres OS user (tests may run as root) must reach the
	// instance directories inside.
	os.Chmod(base, 0o755)
	const secret, password = "instance-test-secret-0123", "pg-instance-password"
	secrets := t.TempDir()
	common := []string{
		"--etcd", strings.Join(endpoints, ","), "--cluster", "inst", "--shard", "s1",
		"--secret-file", writeSecret(t, secrets, "secret", secret),
		"--postgres-password-file", writeSecret(t, secrets, "pgpass", password),
		"--allowed-networks", "127.0.0.0/8",
	}
	s, err := store.Dial(context.Background(), endpoints, "inst")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	pgA := freeAddr(t)
	a := startInstanceRun(t, "s1-a", append(common, "--zone", "zone-a", "--dir", filepath.Join(base, "a"),
		"--postgres-listen", pgA, "--sidecar-listen", "127.0.0.1:0", "--session-listen", "127.0.0.1:0")...)
	recA := waitRecord(t, s, a, store.RolePrimary)
	if recA.PostgresAddr != pgA || recA.Zone != "zone-a" || recA.ShardUID != "s1" || recA.GRPCAddr == "" || recA.SessionAddr == "" {
		t.Errorf("primary's record %+v, want postgres %s", recA, pgA)
	}

	ca := tlstest.NewCA(t, "sidecars")
	cert, key := ca.Issue(t, "s1-b")
	routerCert, routerKey := ca.Issue(t, "router")
	pgB, scB, sessB := freeAddr(t), freeAddr(t), freeAddr(t)
	_, scPort, _ := net.SplitHostPort(scB)
	_, sessPort, _ := net.SplitHostPort(sessB)
	b := startInstanceRun(t, "s1-b", append(common, "--zone", "zone-b", "--dir", filepath.Join(base, "b"), "--metrics-addr", "127.0.0.1:0",
		"--postgres-listen", pgB, "--postgres-advertise", pgB,
		"--sidecar-listen", scB, "--sidecar-advertise", "localhost:"+scPort,
		"--session-listen", sessB, "--session-advertise", "localhost:"+sessPort,
		"--sidecar-tls-cert", cert, "--sidecar-tls-key", key, "--sidecar-tls-client-ca", ca.File)...)
	recB := waitRecord(t, s, b, store.RoleReplica)
	if recB.PostgresAddr != pgB || recB.Zone != "zone-b" || recB.GRPCAddr != "localhost:"+scPort || recB.SessionAddr != "localhost:"+sessPort {
		t.Errorf("replica's record %+v, want postgres %s, advertised sidecar localhost:%s and session localhost:%s", recB, pgB, scPort, sessPort)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	connA := connect(t, ctx, pgA, password)
	var app, state string
	if err := connA.QueryRow(ctx, "SELECT application_name, state FROM pg_stat_replication WHERE application_name = 's1-b'").Scan(&app, &state); err != nil || state != "streaming" {
		t.Errorf("pg_stat_replication on the primary: %q %q %v", app, state, err)
	}
	if _, err := connA.Exec(ctx, "CREATE TABLE t (v text); INSERT INTO t VALUES ('from the primary')"); err != nil {
		t.Fatal(err)
	}
	connB := connect(t, ctx, pgB, password)
	for {
		var v string
		err := connB.QueryRow(ctx, "SELECT v FROM t").Scan(&v)
		if err == nil && v == "from the primary" {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("the primary's row never reached the replica: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	connA.Close(ctx)
	connB.Close(ctx)

	checkSidecarTLS(t, ctx, scB, secret, tlsfiles.Client{CA: ca.File, Cert: routerCert, Key: routerKey})
	checkStatusTLS(t, ctx, endpoints, filepath.Join(secrets, "secret"), tlsfiles.Client{CA: ca.File, Cert: routerCert, Key: routerKey})
	checkInstanceMetrics(t, b, `tessera_sidecar_serving{instance="s1-b",role="replica",shard="s1"} 1`,
		`tessera_sidecar_replication_lag_bytes{instance="s1-b",shard="s1"}`)

	// Stopped and run again on its directory, the replica resumes as one.
	argsB := append(common, "--zone", "zone-b", "--dir", filepath.Join(base, "b"),
		"--postgres-listen", pgB, "--sidecar-listen", scB, "--session-listen", sessB)
	b.stop(t)
	restarted := time.Now()
	b2 := startInstanceRun(t, "s1-b", argsB...)
	if rec := waitRecord(t, s, b2, store.RoleReplica); rec.Started.Before(restarted) {
		t.Errorf("the stopped replica's record outlived it: %+v", rec)
	}
	b2.stop(t)
	a.stop(t)
	for _, r := range []*runningInstance{a, b, b2} {
		if !strings.Contains(r.stderr.String(), "stopping instance "+r.id) {
			t.Errorf("instance %s did not stop by the signal:\n%s", r.id, r.stderr)
		}
	}
	if left := postgresProcesses(base); len(left) > 0 {
		t.Errorf("postgres processes left:\n%s", strings.Join(left, "\n"))
	}
	if recs, err := s.ListRecords(ctx, store.KindSidecar); err != nil || len(recs) != 0 {
		t.Errorf("records left after the stop: %+v %v", recs, err)
	}
}

func connect(t *testing.T, ctx context.Context, addr, password string) *pgx.Conn {
	t.Helper()
	host, port, _ := net.SplitHostPort(addr)
	conn, err := pgx.Connect(ctx, fmt.Sprintf("host=%s port=%s user=postgres password=%s dbname=postgres sslmode=disable", host, port, password))
	if err != nil {
		t.Fatalf("connecting to %s: %v", addr, err)
	}
	return conn
}

// checkSidecarTLS checks that the sidecar at addr serves a TLS client with
// a certificate and refuses a plaintext one.
func checkSidecarTLS(t *testing.T, ctx context.Context, addr, secret string, client tlsfiles.Client) {
	t.Helper()
	cfg, err := client.Config()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		opts sidecar.DialOptions
		ok   bool
	}{
		{"TLS with a client certificate", sidecar.DialOptions{Secret: secret, TLS: cfg}, true},
		{"plaintext", sidecar.DialOptions{Secret: secret}, false},
	} {
		c, err := sidecar.Dial(addr, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		short, cancel := context.WithTimeout(ctx, 5*time.Second)
		_, err = c.Status(short, &pb.StatusRequest{})
		cancel()
		c.Close()
		if (err == nil) != tc.ok {
			t.Errorf("sidecar %s, %s: Status error %v", addr, tc.name, err)
		}
	}
}

// checkInstanceMetrics scrapes the /metrics address the instance printed
// and looks for each of want.
func checkInstanceMetrics(t *testing.T, r *runningInstance, want ...string) {
	t.Helper()
	m := regexp.MustCompile(`instance metrics on (http://\S+/metrics)`).FindStringSubmatch(r.stderr.String())
	if m == nil {
		t.Fatalf("instance %s printed no metrics address:\n%s", r.id, r.stderr)
	}
	resp, err := http.Get(m[1])
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	for _, w := range want {
		if !strings.Contains(string(body), w) {
			t.Errorf("%s has no %q:\n%s", m[1], w, body)
		}
	}
}

// checkStatusTLS runs tessera status with and without the sidecar TLS
// flags: the TLS sidecar s1-b answers only with them.
func checkStatusTLS(t *testing.T, ctx context.Context, endpoints []string, secretFile string, client tlsfiles.Client) {
	t.Helper()
	for _, tc := range []struct {
		name string
		args []string
		ok   bool
	}{
		{"with --sidecar-ca and a client certificate", []string{"--sidecar-ca", client.CA, "--sidecar-cert", client.Cert, "--sidecar-key", client.Key}, true},
		{"plaintext", nil, false},
	} {
		var out, errOut syncBuffer
		args := append([]string{"status", "--json", "--etcd", strings.Join(endpoints, ","), "--cluster", "inst", "--secret-file", secretFile}, tc.args...)
		if code := RunContext(ctx, args, &out, &errOut, Options{}); code != 0 {
			t.Fatalf("tessera status %s exited %d: %s", tc.name, code, errOut.String())
		}
		var report statusReport
		if err := json.Unmarshal([]byte(out.String()), &report); err != nil {
			t.Fatalf("tessera status %s: %v\n%s", tc.name, err, out.String())
		}
		found := false
		for _, r := range report.Instances {
			if r.Instance == "s1-b" {
				found = true
				if (r.Error == "" && r.Serving) != tc.ok {
					t.Errorf("tessera status %s: s1-b %+v", tc.name, r)
				}
			}
		}
		if !found {
			t.Errorf("tessera status %s lists no s1-b: %s", tc.name, out.String())
		}
	}
}
