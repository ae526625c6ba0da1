package e2e

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tesseradb/tessera/router"
	"github.com/tesseradb/tessera/worker"
	"github.com/tesseradb/tessera/workflows"
	"github.com/tesseradb/tessera/workflows/launch"
)

// TestDDLStrategyFromPsql: a session through a router that reaches
// Temporal sets tessera.ddl_strategy and sends ALTER TABLE as psql would
// (the simple protocol). Under 'online_wait' the answer, a NOTICE and one
// row with the migration's workflow and run ids, comes once the OnlineDDL
// workflow has added the column; under 'online' it comes at once and the
// workflow named by the row adds the column. Both run on the real
// Temporal server with a real worker and its real activities.
func TestDDLStrategyFromPsql(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	dir := t.TempDir()
	pwFile := filepath.Join(dir, "replicator-password")
	if err := os.WriteFile(pwFile, []byte("postgres"), 0o600); err != nil {
		t.Fatal(err)
	}
	w, err := worker.Start(ctx, worker.Config{
		TemporalAddr:  temporalSrv.FrontendAddr(),
		EtcdEndpoints: cluster.Info().Etcd,
		Cluster:       cluster.Info().Cluster,
		Secret:        cluster.Secret(),
		ID:            "e2e-ddl-strategy",
		// Its admin records shard-0's primary, which the migration's
		// plan needs, as tessera dev's does.
		Admin:                  true,
		ReplicatorPasswordFile: pwFile,
		Logger:                 slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Stop(context.Background()) })
	starter := &launch.RouterOnlineDDL{Addr: temporalSrv.FrontendAddr()}
	defer starter.Close()
	r, err := router.New(router.Config{ListenAddr: "127.0.0.1:0", Store: cluster.Store(), Secret: cluster.Secret(), OnlineDDL: starter})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer r.Stop(context.Background())

	dsn := func(db string) string {
		return fmt.Sprintf("postgres://postgres:postgres@%s/%s?sslmode=disable", r.Addr(), db)
	}
	admin, err := pgx.Connect(ctx, dsn("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	if _, err := admin.Exec(ctx, "CREATE DATABASE ddlpsql"); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var notices []string
	cfg, err := pgx.ParseConfig(dsn("ddlpsql"))
	if err != nil {
		t.Fatal(err)
	}
	cfg.OnNotice = func(_ *pgconn.PgConn, n *pgconn.Notice) {
		mu.Lock()
		defer mu.Unlock()
		notices = append(notices, n.Message)
	}
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	for _, sql := range []string{
		"CREATE TABLE orders (id bigint PRIMARY KEY, customer text)",
		"INSERT INTO orders SELECT g, 'c' || g FROM generate_series(1, 1000) g",
		"SET tessera.ddl_strategy = 'online_wait'",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	wantID := workflows.OnlineDDLID("ddlpsql", "public", "orders")

	// answer runs sql in the simple protocol and returns its one row.
	answer := func(sql string) (id, runID string) {
		t.Helper()
		res, err := conn.PgConn().Exec(ctx, sql).ReadAll()
		if err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
		if len(res) != 1 || len(res[0].Rows) != 1 || len(res[0].FieldDescriptions) != 2 ||
			res[0].FieldDescriptions[0].Name != "migration_id" || res[0].FieldDescriptions[1].Name != "run_id" {
			t.Fatalf("%s answered %+v: want one row (migration_id, run_id)", sql, res)
		}
		return string(res[0].Rows[0][0]), string(res[0].Rows[0][1])
	}

	started := time.Now()
	id, runID := answer("ALTER TABLE orders ADD COLUMN qty int NOT NULL DEFAULT 0")
	t.Logf("online_wait: answered after %s", time.Since(started).Round(time.Millisecond))
	if id != wantID || runID == "" {
		t.Fatalf("online_wait answered (%q, %q): want (%q, a run id)", id, runID, wantID)
	}
	var qty int
	if err := conn.QueryRow(ctx, "SELECT qty FROM orders WHERE id = 7").Scan(&qty); err != nil || qty != 0 {
		t.Fatalf("after online_wait the new column reads %d, %v", qty, err)
	}
	var res workflows.OnlineDDLResult
	if err := tc.GetWorkflow(ctx, id, runID).Get(ctx, &res); err != nil || res.Phase != workflows.PhaseDone {
		t.Fatalf("the migration %s/%s: %+v, %v", id, runID, res.OnlineDDLProgress, err)
	}

	if _, err := conn.Exec(ctx, "SET tessera.ddl_strategy = 'online'"); err != nil {
		t.Fatal(err)
	}
	id, runID = answer("ALTER TABLE orders ADD COLUMN note text")
	if id != wantID || runID == "" {
		t.Fatalf("online answered (%q, %q)", id, runID)
	}
	if err := tc.GetWorkflow(ctx, id, runID).Get(ctx, &res); err != nil || res.Phase != workflows.PhaseDone {
		t.Fatalf("the migration %s/%s: %+v, %v", id, runID, res.OnlineDDLProgress, err)
	}
	var note *string
	if err := conn.QueryRow(ctx, "SELECT note FROM orders WHERE id = 7").Scan(&note); err != nil || note != nil {
		t.Fatalf("after online the new column reads %v, %v", note, err)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(notices) != 2 || !strings.Contains(notices[0], "completed") || !strings.Contains(notices[1], "started") {
		t.Errorf("notices %q: want one that the first migration completed, one that the second started", notices)
	}
}
