package sidecar_test

import (
	"fmt"
	"io"
	"net/http/httptest"
	"regexp"
	"testing"
	"time"

	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// TestPoolMetrics: a pool of one connection held by a transaction makes a
// second session wait and time out; /metrics counts exactly that, and
// shows the instance serving.
func TestPoolMetrics(t *testing.T) {
	t.Parallel()
	cfg := sidecar.DefaultPoolConfig
	cfg.Capacity, cfg.MaxWait = 1, 200*time.Millisecond
	srv := startSidecar(t, shared, cfg)
	c := dial(t, srv)
	a, b := open(t, c), open(t, c)
	query(t, a, pb.Mode_STATEMENT, "BEGIN")
	if r := query(t, b, pb.Mode_STATEMENT, "SELECT 1"); len(r.errors) != 1 || r.errors[0] != "53300" {
		t.Fatalf("want 53300 while the only connection is in a transaction, got %v", r)
	}
	scrape := func() string {
		rec := httptest.NewRecorder()
		srv.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
		body, _ := io.ReadAll(rec.Body)
		return string(body)
	}
	body := scrape()
	for _, want := range []string{
		`tessera_sidecar_pool_connections{database="postgres",instance="%s",shard="%s",user="postgres"} 1`,
		`tessera_sidecar_pool_idle_connections{database="postgres",instance="%s",shard="%s",user="postgres"} 0`,
		`tessera_sidecar_pool_waits_total{database="postgres",instance="%s",shard="%s",user="postgres"} 1`,
		`tessera_sidecar_pool_timeouts_total{database="postgres",instance="%s",shard="%s",user="postgres"} 1`,
	} {
		line := regexp.MustCompile("(?m)^" + fmt.Sprintf(regexp.QuoteMeta(want), `[^"]*`, `[^"]*`) + "$")
		if !line.MatchString(body) {
			t.Errorf("/metrics has no line %s:\n%s", line, body)
		}
	}
	query(t, a, pb.Mode_STATEMENT, "COMMIT")
	deadline := time.Now().Add(10 * time.Second)
	serving := regexp.MustCompile(`(?m)^tessera_sidecar_serving\{[^}]*role="primary"[^}]*\} 1$`)
	for !serving.MatchString(scrape()) {
		if time.Now().After(deadline) {
			t.Fatalf("the primary is not shown serving:\n%s", scrape())
		}
		time.Sleep(100 * time.Millisecond)
	}
}
