package router_test

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
)

// TestMetricsAndQueryStats runs a known workload through a router of its
// own and checks the counters /metrics shows and the calls, rows and
// shards tessera.query_stats shows for each statement.
func TestMetricsAndQueryStats(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := connect(t, "store")
	mustExec(t, admin, "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"CREATE TABLE IF NOT EXISTS metrics_t (id int)", "TRUNCATE metrics_t")
	r := startDrainable(t)
	cfg, err := pgx.ParseConfig(fmt.Sprintf("postgres://postgres:postgres@%s/store?sslmode=disable", r.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	// One Parse/Bind/Execute/Sync per statement: no describe round trips.
	cfg.DefaultQueryExecMode = pgx.QueryExecModeExec
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	simple := pgx.QueryExecModeSimpleProtocol

	for i := range 5 {
		if _, err := conn.Exec(ctx, "INSERT INTO metrics_t VALUES ($1)", i); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 { // three literals, one normalized statement
		var n int
		if err := conn.QueryRow(ctx, fmt.Sprintf("SELECT count(*) FROM metrics_t WHERE id >= %d", i), simple).Scan(&n); err != nil || n != 5-i {
			t.Fatalf("count: %d, %v", n, err)
		}
	}
	for range 2 { // on both customer shards
		if _, err := conn.Exec(ctx, "SELECT count(*) FROM customers", simple); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, "UPDATE metrics_t SET id = id + 10 WHERE id < 3", simple); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT * FROM metrics_missing", simple); err == nil {
		t.Fatal("a select of a missing table succeeded")
	}

	rec := httptest.NewRecorder()
	r.MetricsHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	body, _ := io.ReadAll(rec.Body)
	for _, want := range []string{
		`tessera_router_statements_total{database="store",kind="insert"} 5`,
		`tessera_router_statements_total{database="store",kind="select"} 6`,
		`tessera_router_statements_total{database="store",kind="update"} 1`,
		`tessera_router_statement_errors_total{sqlstate="42P01"} 1`,
		`tessera_router_multishard_statements_total 2`,
		`tessera_router_statement_duration_seconds_count{kind="insert"} 5`,
		`tessera_router_statement_shards_count 12`,
		`tessera_router_sessions 1`,
	} {
		if !strings.Contains(string(body), want+"\n") {
			t.Errorf("/metrics has no line %q", want)
		}
	}
	if t.Failed() {
		t.Logf("/metrics:\n%s", body)
	}

	type stat struct {
		calls, rows, shardCalls int64
		multi                   bool
	}
	read := func() map[string]stat {
		rows, err := conn.Query(ctx, "SELECT * FROM tessera.query_stats", simple)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		got := map[string]stat{}
		for rows.Next() {
			v, err := rows.Values()
			if err != nil {
				t.Fatal(err)
			}
			if v[0] != "store" {
				t.Fatalf("a row of database %v", v[0])
			}
			got[v[1].(string)] = stat{v[2].(int64), v[7].(int64), v[8].(int64), v[10].(bool)}
		}
		if err := rows.Err(); err != nil {
			t.Fatal(err)
		}
		return got
	}
	got := read()
	for text, want := range map[string]stat{
		"INSERT INTO metrics_t VALUES ($1)":               {5, 5, 5, false},
		"SELECT count(*) FROM metrics_t WHERE id >= $1":   {3, 3, 3, false},
		"SELECT count(*) FROM customers":                  {2, 2, 4, true},
		"UPDATE metrics_t SET id = id + $1 WHERE id < $2": {1, 3, 1, false},
		"SELECT * FROM metrics_missing":                   {1, 0, 1, false},
	} {
		if got[text] != want {
			t.Errorf("query_stats for %q: %+v, want %+v", text, got[text], want)
		}
	}
	if len(got) != 5 {
		t.Errorf("query_stats has %d statements, want 5: %v", len(got), got)
	}

	if _, err := conn.Exec(ctx, "select TESSERA.reset_query_stats();", simple); err != nil {
		t.Fatal(err)
	}
	if got := read(); len(got) != 0 {
		t.Errorf("query_stats after the reset: %v", got)
	}
}
