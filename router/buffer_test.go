package router_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/tesseradb/tessera/docker/grafana"
	"github.com/tesseradb/tessera/router"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store"
)

// The buffering tests disturb shard-0 (a buffer signal, a fenced
// primary), so they do not run in parallel with the others.

// secondRouter starts another router on the package's cluster, as a
// stateless router would run beside the first, with its own buffering.
func secondRouter(t *testing.T, buf router.BufferConfig) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@%s/postgres?sslmode=disable", startRouter(t, buf)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

// startRouter starts another router on the package's cluster and
// returns its address.
func startRouter(t *testing.T, buf router.BufferConfig) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	r, err := router.New(router.Config{ListenAddr: "127.0.0.1:0", Store: cluster.Store(), Secret: cluster.Secret(), Buffer: buf})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop(context.Background()) })
	return r.Addr()
}

func signal(t *testing.T, shard string, until time.Time) {
	t.Helper()
	_, err := cluster.Store().UpdateShardState(context.Background(), shard, func(st *store.ShardState) error {
		st.Buffer = nil
		if !until.IsZero() {
			st.Buffer = &store.BufferSignal{Reason: "test", Until: until}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// async runs sql on conn in the background.
func async(conn *pgx.Conn, sql string) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(context.Background(), sql)
		done <- err
	}()
	return done
}

func TestBufferingOnPlannedSignal(t *testing.T) {
	conn := connect(t, "postgres")
	other := connect(t, "store")
	ctx := context.Background()
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS buffer_probe (id int)"); err != nil {
		t.Fatal(err)
	}
	if _, err := other.Exec(ctx, "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	// The router learns the table's columns from the authoritative shard,
	// shard-0, which is about to buffer: learn them first.
	lookup := "SELECT count(*) FROM customers WHERE customer_id = 1"
	var n int
	if err := other.QueryRow(ctx, lookup, pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
		t.Fatal(err)
	}
	signal(t, "shard-0", time.Now().Add(20*time.Second))
	t.Cleanup(func() { signal(t, "shard-0", time.Time{}) })
	time.Sleep(200 * time.Millisecond) // the routers see the signal

	start := time.Now()
	done := async(conn, "INSERT INTO buffer_probe VALUES (1)")
	// Another shard is not held up.
	if err := other.QueryRow(ctx, lookup, pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		t.Fatalf("the statement ran while shard-0 was buffering (err %v)", err)
	case <-time.After(800 * time.Millisecond):
	}
	signal(t, "shard-0", time.Time{})
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("buffered statement failed: %v", err)
		}
		t.Logf("held for %v", time.Since(start))
	case <-time.After(5 * time.Second):
		t.Fatal("the statement was not released when the signal ended")
	}
	// The wait is in the router's metrics.
	if n := metricValue(t, cluster.Metrics(), "tessera_router_buffered_statements_total", "buffer", "primary", "outcome", "released"); n < 1 {
		t.Errorf("tessera_router_buffered_statements_total{buffer=primary,outcome=released} = %v after a buffered statement was released", n)
	}
	if n := metricValue(t, cluster.Metrics(), "tessera_router_buffer_wait_seconds", "buffer", "primary"); n < 1 {
		t.Errorf("tessera_router_buffer_wait_seconds{buffer=primary} counted %v waits", n)
	}
	// Every metric of the router and the sidecars that the Grafana
	// dashboard (docker/grafana) reads is one they export (an error makes
	// the errors' counter exist).
	other.Exec(ctx, "SELECT * FROM dashboard_missing_table")
	checkDashboardReads(t, cluster.Metrics(), "tessera_")

	// A statement that waits longer than the window gets 57P03.
	short := secondRouter(t, router.BufferConfig{Window: 500 * time.Millisecond})
	signal(t, "shard-0", time.Now().Add(20*time.Second))
	time.Sleep(200 * time.Millisecond)
	start = time.Now()
	_, err := short.Exec(ctx, "INSERT INTO buffer_probe VALUES (2)")
	if sqlstate(err) != "57P03" || time.Since(start) < 400*time.Millisecond {
		t.Fatalf("beyond the window: err %v after %v, want 57P03 after about 500ms", err, time.Since(start))
	}
	// A transaction already open on the shard is not held.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	signal(t, "shard-0", time.Time{})
	if _, err := tx.Exec(ctx, "INSERT INTO buffer_probe VALUES (3)"); err != nil {
		t.Fatal(err)
	}
	signal(t, "shard-0", time.Now().Add(20*time.Second))
	time.Sleep(200 * time.Millisecond)
	start = time.Now()
	if _, err := tx.Exec(ctx, "INSERT INTO buffer_probe VALUES (4)"); err != nil || time.Since(start) > 300*time.Millisecond {
		t.Fatalf("a statement of an open transaction: err %v after %v, want it to run at once", err, time.Since(start))
	}
}

// primarySidecar returns a client for the sidecar of shard's primary.
func primarySidecar(t *testing.T, shard string) *sidecar.Client {
	t.Helper()
	for _, s := range cluster.Info().Shards {
		for _, in := range s.Instances {
			if s.UID == shard && in.Role == "primary" {
				c, err := sidecar.Dial(in.Sidecar, sidecar.DialOptions{Secret: cluster.Secret()})
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { c.Close() })
				return c
			}
		}
	}
	t.Fatalf("no primary for %s", shard)
	return nil
}

// A fenced primary (as a switchover or failover leaves the old one) has
// its sidecar refuse every statement with 57P03 (sidecar/fence.go): that
// is what a router without buffering passes on; with buffering, writes
// wait and succeed once the primary takes writes again.
func TestBufferingHidesAReadOnlyPrimary(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "postgres")
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS buffer_probe (id int)"); err != nil {
		t.Fatal(err)
	}
	unbuffered := secondRouter(t, router.BufferConfig{Disabled: true})
	sc := primarySidecar(t, "shard-0")
	if _, err := sc.Fence(ctx, &pb.FenceRequest{}); err != nil {
		t.Fatal(err)
	}
	unfenced := false
	unfence := func() {
		if !unfenced {
			unfenced = true
			if _, err := sc.Unfence(ctx, &pb.UnfenceRequest{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	t.Cleanup(unfence)
	// Fencing ended every session; let the health streams say so.
	time.Sleep(1500 * time.Millisecond)

	if _, err := unbuffered.Exec(ctx, "INSERT INTO buffer_probe VALUES (10)"); sqlstate(err) != "57P03" {
		t.Fatalf("without buffering: %v, want 57P03", err)
	}
	start := time.Now()
	done := async(conn, "INSERT INTO buffer_probe VALUES (11)")
	select {
	case err := <-done:
		t.Fatalf("the write finished while the primary was read-only: %v", err)
	case <-time.After(time.Second):
	}
	unfence()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("buffered write failed: %v", err)
		}
		t.Logf("write held for %v", time.Since(start))
	case <-time.After(8 * time.Second):
		t.Fatal("the buffered write was not released after unfencing")
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM buffer_probe WHERE id IN (10, 11)").Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows 10 and 11: %d, %v; want only the buffered one", n, err)
	}
}

// metricValue returns the value of a counter (or the count of a
// histogram) named name whose labels include the given name, value pairs,
// summed over the series that match.
func metricValue(t *testing.T, g prometheus.Gatherer, name string, labels ...string) float64 {
	t.Helper()
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
	series:
		for _, m := range f.GetMetric() {
			for i := 0; i+1 < len(labels); i += 2 {
				found := false
				for _, l := range m.GetLabel() {
					if l.GetName() == labels[i] && l.GetValue() == labels[i+1] {
						found = true
					}
				}
				if !found {
					continue series
				}
			}
			switch {
			case m.Counter != nil:
				sum += m.Counter.GetValue()
			case m.Histogram != nil:
				sum += float64(m.Histogram.GetSampleCount())
			case m.Gauge != nil:
				sum += m.Gauge.GetValue()
			}
		}
	}
	return sum
}

// checkDashboardReads fails the test unless every metric with prefix that
// the Grafana dashboard reads is one g gathers.
func checkDashboardReads(t *testing.T, g prometheus.Gatherer, prefix string) {
	t.Helper()
	names, err := grafana.Metrics()
	if err != nil {
		t.Fatal(err)
	}
	families, err := g.Gather()
	if err != nil {
		t.Fatal(err)
	}
	exported := map[string]bool{}
	for _, f := range families {
		exported[f.GetName()] = true
	}
	checked := 0
	for _, name := range names {
		if !strings.HasPrefix(name, prefix) {
			continue
		}
		checked++
		if !exported[name] {
			t.Errorf("the dashboard reads %s, which no component exports", name)
		}
	}
	if checked == 0 {
		t.Errorf("the dashboard reads no metric beginning %s", prefix)
	}
}
