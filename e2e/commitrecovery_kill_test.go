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

// TestCommitRecoveryWorkerKilled kills the worker process running a
// recovery pass (ResolvePrepared) on the real Temporal server at its two
// hardest moments, and checks that another worker finishes the pass with
// every transaction resolved by its decision, none committed or rolled
// back against it, and none left prepared:
//   - in the middle of the pass: it waits on the decision row of a
//     transaction whose coordinator is still inside its commit-point
//     transaction (a row lock), having possibly resolved others first;
//     the coordinator then commits, so that transaction must commit;
//   - after the pass did all its work, before it reported it
//     (stopAtStep): the pass runs again on another worker and must find
//     nothing left to undo.
//
// Each round prepares transactions whose decision was recorded as
// commit, and transactions with no decision (their coordinator died
// before its commit point), which must be rolled back.
func TestCommitRecoveryWorkerKilled(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	shard := cluster.Info().Shards[0]
	addr := primaryDSN(t)
	open := func() *pgx.Conn {
		c, err := pgx.Connect(ctx, addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close(context.Background()) })
		return c
	}
	admin := open()
	mustRun(t, ctx, admin, twophase.EnsureDecisions,
		"DROP TABLE IF EXISTS recovery_kill_probe", "CREATE TABLE recovery_kill_probe (gid text PRIMARY KEY)")
	gen := twophase.NewGenerator()
	// prepare leaves a transaction prepared that inserted its gid, with
	// its commit decision recorded when decided.
	prepare := func(decided bool) string {
		gid := gen.Next(shard.UID)
		c := open()
		mustRun(t, ctx, c, "BEGIN", "INSERT INTO recovery_kill_probe VALUES ('"+gid+"')", "PREPARE TRANSACTION '"+gid+"'")
		if decided {
			mustRun(t, ctx, c, "BEGIN", twophase.RecordCommit(cluster.Secret(), gid), "COMMIT")
		}
		return gid
	}
	check := func(round string, commit, rollback []string) {
		t.Helper()
		for _, gid := range append(slices.Clone(commit), rollback...) {
			var prepared, present int
			if err := admin.QueryRow(ctx, "SELECT (SELECT count(*) FROM pg_prepared_xacts WHERE gid = $1), (SELECT count(*) FROM recovery_kill_probe WHERE gid = $1)",
				gid).Scan(&prepared, &present); err != nil {
				t.Fatal(err)
			}
			want := 0
			if slices.Contains(commit, gid) {
				want = 1
			}
			if prepared != 0 || present != want {
				t.Errorf("%s: %s is prepared %d times and its row present %d times, want 0 and %d", round, gid, prepared, present, want)
			}
		}
	}
	resolve := func(id string) client.WorkflowRun {
		run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue},
			workflows.ResolvePreparedName, activities.ResolvePreparedInput{})
		if err != nil {
			t.Fatal(err)
		}
		return run
	}

	// Round 1: killed while it waits on a coordinator's row lock.
	var commit, rollback []string
	for range 5 {
		commit = append(commit, prepare(true))
		rollback = append(rollback, prepare(false))
	}
	waiting := prepare(false)
	coordinator := open()
	mustRun(t, ctx, coordinator, "BEGIN", twophase.RecordCommit(cluster.Secret(), waiting))
	first := workerProcess(t, "recovery-kill-1")
	run := resolve(fmt.Sprintf("resolve-kill-mid-%d", time.Now().UnixNano()))
	eventually(t, time.Minute, "the pass waits on the coordinator's row lock", func() error {
		var n int
		if err := admin.QueryRow(ctx, `SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE '%commit_decisions%'`).Scan(&n); err != nil {
			return err
		}
		if n == 0 {
			return fmt.Errorf("no session waits on a lock")
		}
		return nil
	})
	first.Process.Kill()
	first.Wait()
	mustRun(t, ctx, coordinator, "COMMIT")
	commit = append(commit, waiting)
	second := workerProcess(t, "recovery-kill-2")
	var res activities.ResolvePreparedResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("the pass after its worker was killed mid-pass: %v", err)
	}
	check("killed mid-pass", commit, rollback)
	t.Logf("killed mid-pass: the next worker committed %d and rolled back %d", len(res.Committed), len(res.RolledBack))
	// Only the next round's worker may take its pass.
	second.Process.Kill()
	second.Wait()

	// Round 2: killed after its work, before reporting it.
	commit, rollback = nil, nil
	for range 5 {
		commit = append(commit, prepare(true))
		rollback = append(rollback, prepare(false))
	}
	stopping, stopped := stoppingWorkerProcess(t, "recovery-kill-3", "ResolvePrepared")
	run = resolve(fmt.Sprintf("resolve-kill-after-%d", time.Now().UnixNano()))
	select {
	case <-stopped:
	case <-ctx.Done():
		t.Fatal("the worker never stopped inside ResolvePrepared")
	}
	check("done, not reported", commit, rollback) // its work is done
	stopping.Process.Kill()
	stopping.Wait()
	workerProcess(t, "recovery-kill-4")
	res = activities.ResolvePreparedResult{}
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("the pass after its worker was killed before reporting: %v", err)
	}
	check("killed before reporting", commit, rollback)
	for _, gid := range append(commit, rollback...) {
		if slices.Contains(res.Committed, gid) || slices.Contains(res.RolledBack, gid) {
			t.Errorf("the repeated pass finished %s again: %+v", gid, res)
		}
	}
	admin.Exec(ctx, "DROP TABLE recovery_kill_probe")
}

func mustRun(t *testing.T, ctx context.Context, c *pgx.Conn, sqls ...string) {
	t.Helper()
	for _, sql := range sqls {
		if _, err := c.Exec(ctx, sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

// primaryDSN is a direct DSN of database postgres on shard-0's primary
// now (the high-availability tests move it): the one its state names, or
// the one that started as primary when no state is stored.
func primaryDSN(t *testing.T) string {
	t.Helper()
	st, err := cluster.Store().GetShardState(context.Background(), cluster.Info().Shards[0].UID)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range cluster.Info().Shards[0].Instances {
		if in.ID == st.Primary || st.Primary == "" && in.Role == "primary" {
			return fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/postgres?sslmode=disable", in.Port)
		}
	}
	t.Fatalf("shard-0's primary %q is not among its instances", st.Primary)
	return ""
}
