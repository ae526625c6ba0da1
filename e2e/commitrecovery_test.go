package e2e

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/twophase"
	"github.com/tesseradb/tessera/workflows"
)

// TestCommitRecoveryOnTemporal: a worker creates the recovery schedule of
// atomic commits, and a ResolvePrepared run on the real Temporal server
// rolls back a transaction a dead router left prepared with no decision.
func TestCommitRecoveryOnTemporal(t *testing.T) {
	startWorker(t, "commit-recovery", false)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if _, err := tc.ScheduleClient().GetHandle(ctx, workflows.ResolvePreparedScheduleID).Describe(ctx); err != nil {
		t.Fatalf("the recovery schedule: %v", err)
	}
	shard := cluster.Info().Shards[0]
	var addr string
	for _, in := range shard.Instances {
		if in.Role == "primary" {
			addr = fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/postgres?sslmode=disable", in.Port)
		}
	}
	conn, err := pgx.Connect(ctx, addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(context.Background())
	gid := twophase.NewGenerator().Next(shard.UID)
	for _, sql := range []string{
		"CREATE TABLE IF NOT EXISTS commit_recovery_probe (id int)",
		"BEGIN",
		"INSERT INTO commit_recovery_probe VALUES (1)",
		"PREPARE TRANSACTION '" + gid + "'",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "resolve-prepared-e2e", TaskQueue: workflows.TaskQueue},
		workflows.ResolvePreparedName, activities.ResolvePreparedInput{})
	if err != nil {
		t.Fatal(err)
	}
	var res activities.ResolvePreparedResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(res.RolledBack, gid) {
		t.Fatalf("recovery: %+v, want %s rolled back", res, gid)
	}
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1", gid).Scan(&n); err != nil || n != 0 {
		t.Fatalf("%s still prepared (%d, %v)", gid, n, err)
	}
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM commit_recovery_probe").Scan(&n); err != nil || n != 0 {
		t.Fatalf("the rolled-back insert is visible: %d rows, %v", n, err)
	}
	conn.Exec(ctx, "DROP TABLE commit_recovery_probe")
}
