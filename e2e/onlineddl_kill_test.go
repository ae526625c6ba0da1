package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// killTopology spreads group "data" over shard-1 and shard-2: with
// shard-0 (the authoritative group's, which holds the tables empty) a
// migration runs on three shards.
var killTopology = strings.Replace(routedTopology, `"key_ranges": [{"shard_uid": "shard-1"}]`,
	`"key_ranges": [{"shard_uid": "shard-1", "end": "80"}, {"shard_uid": "shard-2", "start": "80"}]`, 1)

// killSeedRows is how many keys each of the two writers seeds per table:
// about 12,500 rows of accounts per data shard, two batches of the copy.
const killSeedRows = 12500

// TestOnlineDDLShadowPathSurvivesKilledWorker is issue #15's "a killed
// worker part-way": a worker process (which runs the shadow path's
// activities and, inside them, its streams: OnlineDDL has no Replicator
// process) is SIGKILLed inside each step of the shadow path in turn while
// two clients write through the router, and a new worker is started each
// time. The first migration (ALTER COLUMN name TYPE varchar(200), with
// hold_for_revert) is killed after PrepareShadow has created every
// shard's shadow, in the middle of shard-1's copy (its first batch
// committed, the second held by a row lock the test takes), after that
// copy ended, after every shard's swap committed, and after every shard's
// revert: it ends reverted, the old type on every shard. The same
// statement again, without hold_for_revert, is killed after
// CompleteShadow: it ends done, the new type on every shard. A stopped
// step's effects are made and not reported (stopAtStep), so each retry
// must find them. After each migration: no shard on the other schema
// (the schema check clean), every acknowledged write in place through the
// router and on its shard, no writer error, and nothing of the migration
// left. Each kill's recovery (the kill to the step's next completion) is
// logged, not asserted.
func TestOnlineDDLShadowPathSurvivesKilledWorker(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	rc := newReshardCluster(t, ctx, []string{"shard-1", "shard-2"})
	top, err := topo.Parse([]byte(killTopology))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.c.Store().ApplyTopology(ctx, top, store.ApplyOptions{Force: true, ExpectedRevision: store.AnyRevision}); err != nil {
		t.Fatal(err)
	}
	// An admin records each shard's primary, then leaves: only the
	// killable workers take the migration's workflow and activities.
	rc.startWorker(t, ctx, "ddl-kill-admin").Stop(ctx)

	armFile := filepath.Join(t.TempDir(), "stop-at")
	arm := func(step string) {
		if err := os.WriteFile(armFile, []byte(step), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	arm("")
	info := rc.c.Info()
	stops := make(chan stepStop, 16)
	started := 0
	newWorker := func() *stepProc {
		started++
		id := fmt.Sprintf("ddl-kill-worker-%d", started)
		return rc.startStepProc(t, stops, workerEnv, workerSpec{TemporalAddr: temporalSrv.FrontendAddr(), EtcdEndpoints: info.Etcd, Cluster: info.Cluster,
			Secret: rc.c.Secret(), ID: id, ReplicatorPasswordFile: rc.pwFile, StopAtFile: armFile}, store.KindWorker, id)
	}

	hold := &sync.RWMutex{}
	clients := make([]*reshardClient, 2)
	for i := range clients {
		clients[i] = newReshardClient(i, rc.routerConn(t, ctx), hold)
		rc.seedRouted(t, ctx, clients[i].seed(killSeedRows))
	}
	writing, stopWriting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); c.run(writing) }()
	}
	defer func() { stopWriting(); wg.Wait() }()

	// Each writer's longest pause between acknowledged writes, leaving
	// out the test's own reads of the rows (which hold the writers).
	longest := make([]time.Duration, len(clients))
	checkRows := func(name string) {
		for i, c := range clients {
			gap, _ := c.gapSince(time.Time{})
			longest[i] = max(longest[i], gap)
		}
		rc.checkRowsOn(t, ctx, hold, clients, name, []string{"shard-1", "shard-2"})
		for _, c := range clients {
			c.resetGap(time.Now())
		}
	}

	const sql = "ALTER TABLE accounts ALTER COLUMN name TYPE varchar(200)"
	id := workflows.OnlineDDLID("shop", "public", "accounts")
	var figures []string
	// killed kills p, which stopped in step on n shards (or, with n 0,
	// is in the middle of it), and returns when.
	killed := func(p *stepProc, step string) time.Time {
		attempt, running := startedActivity(t, ctx, id, step)
		if !running {
			t.Fatalf("the worker stopped in %s but the server shows no attempt of it running", step)
		}
		arm("")
		p.kill(t)
		t.Logf("%s killed in %s (attempt %d)", p.name, step, attempt)
		return time.Now()
	}
	// awaitStops waits until n shards' activities stopped in step, all in
	// one worker process (every shard runs its step at once).
	awaitStops := func(step string, n int) *stepProc {
		var proc *stepProc
		for i := 0; i < n; i++ {
			select {
			case s := <-stops:
				if s.step != step {
					t.Fatalf("%s stopped at %s, armed for %s", s.proc.name, s.step, step)
				}
				proc = s.proc
			case <-time.After(2 * time.Minute):
				t.Fatalf("%d of %d shards stopped in %s after 2 minutes", i, n, step)
			}
		}
		return proc
	}
	// recovered notes a kill; once its migration has ended, checkKills
	// checks that each killed attempt timed out (the kill was in the
	// step, and the step ran again) and logs how long after the kill the
	// step next completed.
	type killAt struct {
		step, where string
		at          time.Time
	}
	var kills []killAt
	recovered := func(step, where string, at time.Time) { kills = append(kills, killAt{step, where, at}) }
	checkKills := func() {
		for _, k := range kills {
			hist := timeline(t, ctx, id, k.at)
			if !regexp.MustCompile(`ActivityTaskTimedOut\[` + k.step + `\]`).MatchString(hist) {
				t.Errorf("%s: no attempt of %s timed out after the kill: the kill was not in the step; history: %s", k.where, k.step, hist)
			}
			retried, completed := retriedAfter(t, ctx, id, k.step, k.at)
			fig := fmt.Sprintf("killed in %s (%s): retried %s after the kill, completed %s after it", k.step, k.where, retried, completed)
			figures = append(figures, fig)
			t.Log(fig)
		}
		kills = nil
	}

	// The first migration: hold_for_revert, then Revert.
	errsBefore := writerErrors(clients)
	arm(workflows.PrepareShadowActivity)
	proc := newWorker()
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.OnlineDDLName,
		workflows.OnlineDDLInput{Database: "shop", SQL: sql, HoldForRevert: true})
	if err != nil {
		t.Fatal(err)
	}
	kill := killed(awaitStops(workflows.PrepareShadowActivity, 3), workflows.PrepareShadowActivity)
	// shard-1's copy will stop after its first batch: a trigger the test
	// puts on the shadow makes each row of the second batch wait for an
	// advisory lock the test holds (a lock that, unlike a row lock, takes
	// no transaction id: creating the copy's slot waits for those).
	shard1 := rc.direct(t, ctx, "shard-1")
	var secondBatch int64
	if err := shard1.QueryRow(ctx, "SELECT id FROM accounts ORDER BY id OFFSET 10600 LIMIT 1").Scan(&secondBatch); err != nil {
		t.Fatal(err)
	}
	const holdCopyLock = 4242
	holder := rc.direct(t, ctx, "shard-1")
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_lock($1)", holdCopyLock); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{
		fmt.Sprintf(`CREATE FUNCTION test_hold_copy() RETURNS trigger LANGUAGE plpgsql AS $$BEGIN
			IF NEW.id >= %d THEN PERFORM pg_advisory_xact_lock_shared(%d); END IF; RETURN NEW; END$$`, secondBatch, holdCopyLock),
		"CREATE TRIGGER test_hold_copy BEFORE INSERT ON _tessera_shadow_accounts FOR EACH ROW EXECUTE FUNCTION test_hold_copy()",
	} {
		if _, err := shard1.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	proc = newWorker()
	recovered(workflows.PrepareShadowActivity, "every shard", kill)
	eventually(t, 2*time.Minute, "shard-1's copy commits its first batch and waits on the test's lock, the other shards' copies reported", func() error {
		// The other shards' copies done: the next kill in CopyShadow is
		// shard-1's.
		for _, st := range onlineDDLProgress(t, ctx, id).Shards {
			if st.Shard != "shard-1" && st.Shadow != workflows.ShadowCopied {
				return fmt.Errorf("%s is %q", st.Shard, st.Shadow)
			}
		}
		var copied, waiting int64
		err := shard1.QueryRow(ctx, `SELECT (SELECT count(*) FROM _tessera_shadow_accounts),
			(SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND datname = 'shop')`).Scan(&copied, &waiting)
		if err != nil {
			return err
		}
		if copied < 10000 || waiting == 0 {
			return fmt.Errorf("%d rows in the shadow, %d sessions waiting for a lock", copied, waiting)
		}
		return nil
	})
	kill = killed(proc, workflows.CopyShadowActivity)
	// The killed worker's batch goes on once the lock is free, finds its
	// client gone and rolls back; dropping the trigger waits for it.
	if _, err := holder.Exec(ctx, "SELECT pg_advisory_unlock($1)", holdCopyLock); err != nil {
		t.Fatal(err)
	}
	for _, q := range []string{"DROP TRIGGER test_hold_copy ON _tessera_shadow_accounts", "DROP FUNCTION test_hold_copy()"} {
		if _, err := shard1.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	arm(workflows.CopyShadowActivity)
	proc = newWorker()
	recovered(workflows.CopyShadowActivity, "shard-1, after its first batch", kill)
	// The resumed copy (the other shards' copies have been reported).
	kill = killed(awaitStops(workflows.CopyShadowActivity, 1), workflows.CopyShadowActivity)
	arm(workflows.SwapShadowActivity)
	proc = newWorker()
	recovered(workflows.CopyShadowActivity, "shard-1, its copy done", kill)
	kill = killed(awaitStops(workflows.SwapShadowActivity, 3), workflows.SwapShadowActivity)
	proc = newWorker()
	recovered(workflows.SwapShadowActivity, "every shard, the swap committed", kill)
	eventually(t, 2*time.Minute, "every shard swapped, the reverse streams running", func() error {
		if p := onlineDDLProgress(t, ctx, id); p.Phase != workflows.PhaseSwapped {
			return fmt.Errorf("phase %s", p.Phase)
		}
		return nil
	})
	rc.checkColumnType(t, ctx, "accounts", "name", "character varying(200)") // swapped
	stale := rc.settleRouterReads(t, ctx)
	checkRows("swapped, the worker killed four times")
	arm(workflows.RevertShadowActivity)
	handle, err := tc.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: workflows.OnlineDDLRevertUpdate,
		WaitForStage: client.WorkflowUpdateStageCompleted})
	if err == nil {
		err = handle.Get(ctx, nil)
	}
	if err != nil {
		t.Fatalf("Revert: %v", err)
	}
	kill = killed(awaitStops(workflows.RevertShadowActivity, 3), workflows.RevertShadowActivity)
	proc = newWorker()
	var res workflows.OnlineDDLResult
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("the first migration failed: %v", err)
	}
	recovered(workflows.RevertShadowActivity, "every shard, the revert committed", kill)
	checkKills()
	rc.checkMigrationEnded(t, ctx, "reverted", res, workflows.PhaseReverted, workflows.ShadowReverted)
	rc.checkColumnType(t, ctx, "accounts", "name", "text") // reverted
	stale += rc.settleRouterReads(t, ctx)
	checkRows("reverted")

	// The second: the same statement, completed at once.
	arm(workflows.CompleteShadowActivity)
	run, err = tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue}, workflows.OnlineDDLName,
		workflows.OnlineDDLInput{Database: "shop", SQL: sql})
	if err != nil {
		t.Fatal(err)
	}
	kill = killed(awaitStops(workflows.CompleteShadowActivity, 3), workflows.CompleteShadowActivity)
	newWorker()
	res = workflows.OnlineDDLResult{}
	if err := run.Get(ctx, &res); err != nil {
		t.Fatalf("the second migration failed: %v", err)
	}
	recovered(workflows.CompleteShadowActivity, "every shard", kill)
	checkKills()
	rc.checkMigrationEnded(t, ctx, "completed", res, workflows.PhaseDone, workflows.ShadowCompleted)
	rc.checkColumnType(t, ctx, "accounts", "name", "character varying(200)") // completed
	stale += rc.settleRouterReads(t, ctx)
	checkRows("completed")
	stopWriting()
	wg.Wait()

	total := 0
	for _, c := range clients {
		total += c.acked
		for _, e := range c.errs {
			t.Errorf("writer %d: %s", c.id, e)
		}
		for _, a := range c.anomalies {
			t.Errorf("writer %d: %s", c.id, a)
		}
		gap, _ := c.gapSince(time.Time{})
		t.Logf("writer %d: %d acknowledged writes, longest pause %s (the test's reads left out)", c.id, c.acked, max(longest[c.id], gap).Round(time.Millisecond))
	}
	t.Logf("%d kills in two migrations, %d acknowledged writes through the router, %d writer errors, %d reads through the router failed with a pooled statement's stale result type; %s in all",
		len(figures), total, writerErrors(clients)-errsBefore, stale, time.Since(began).Round(time.Second))
	for _, f := range figures {
		t.Log(f)
	}
}

// seedRouted loads seed rows straight into the shard each key routes to.
func (rc *reshardCluster) seedRouted(t *testing.T, ctx context.Context, rows [][][]any) {
	t.Helper()
	top := rc.top()
	for ti, tb := range shardTables {
		place := top.Resolve("shop", "public", tb.name)
		typ := shardfunc.Text
		if tb.keyType == "uuid" {
			typ = shardfunc.UUID
		}
		byShard := map[string][][]any{}
		for _, r := range rows[ti] {
			k := r[0].(string)
			var shard string
			var err error
			if tb.keyType == "bigint" {
				var n int64
				fmt.Sscan(k, &n)
				_, shard, err = place.RouteInt(n)
			} else {
				_, shard, err = place.Route(typ, shardfunc.TextFormat, []byte(k))
			}
			if err != nil {
				t.Fatal(err)
			}
			byShard[shard] = append(byShard[shard], r)
		}
		for shard, rs := range byShard {
			if _, err := rc.direct(t, ctx, shard).CopyFrom(ctx, pgx.Identifier{tb.name}, []string{"id", "name", "note", "payload"}, textRows(rs)); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// checkMigrationEnded checks a migration's result (its phase, each
// shard's shadow state, a clean schema check) and that nothing of it is
// left on any shard: no slot, publication, origin, shadow or old table.
func (rc *reshardCluster) checkMigrationEnded(t *testing.T, ctx context.Context, name string, res workflows.OnlineDDLResult, phase, shadow string) {
	t.Helper()
	if res.Phase != phase || len(res.Shards) != 3 || res.SchemaCheck == nil || len(res.SchemaCheck.Differences) != 0 {
		t.Errorf("%s: result %+v", name, res.OnlineDDLProgress)
	}
	for _, s := range res.Shards {
		t.Logf("%s: shard %s: %s, %d rows copied, lock held %.1f ms, %d attempts", name, s.Shard, s.Shadow, s.Rows, s.Millis, s.Attempts)
		if s.Shadow != shadow {
			t.Errorf("%s: shard %s is %s, want %s", name, s.Shard, s.Shadow, shadow)
		}
	}
	for _, s := range append([]string{"shard-0"}, rc.shards...) {
		var left int64
		err := rc.direct(t, ctx, s).QueryRow(ctx, `SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_type = 'logical')
			+ (SELECT count(*) FROM pg_publication) + (SELECT count(*) FROM pg_replication_origin)
			+ (SELECT count(*) FROM pg_class WHERE relname LIKE '\_tessera\_shadow\_%' OR relname LIKE '\_tessera\_old\_%')`).Scan(&left)
		if err != nil || left != 0 {
			t.Errorf("%s: %d slots, publications, origins or tables of the migration left on %s (%v)", name, left, s, err)
		}
	}
}

func onlineDDLProgress(t *testing.T, ctx context.Context, id string) workflows.OnlineDDLProgress {
	t.Helper()
	var prog workflows.OnlineDDLProgress
	v, err := tc.QueryWorkflow(ctx, id, "", workflows.OnlineDDLProgressQuery)
	if err == nil {
		err = v.Get(&prog)
	}
	if err != nil {
		t.Fatal(err)
	}
	return prog
}

// retriedAfter is how long after since the workflow's latest run
// scheduled an activity of type name again, and how long until one
// completed ("never" if none did).
func retriedAfter(t *testing.T, ctx context.Context, id, name string, since time.Time) (retried, completed string) {
	t.Helper()
	retried, completed = "never", "never"
	names := map[int64]string{}
	it := tc.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		after := e.EventTime.AsTime().Sub(since)
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			names[e.EventId] = a.ActivityType.GetName()
			if after > 0 && a.ActivityType.GetName() == name && retried == "never" {
				retried = after.Round(time.Millisecond).String()
			}
		}
		if c := e.GetActivityTaskCompletedEventAttributes(); c != nil && after > 0 && names[c.ScheduledEventId] == name && completed == "never" {
			completed = after.Round(time.Millisecond).String()
		}
	}
	return retried, completed
}

// settleRouterReads reads accounts through the router until the read
// succeeds ten times in a row, and returns how many attempts failed with
// 0A000 "cached plan must not change result type": a session that
// prepares a statement after the change must get it planned afresh (the
// router names it with the schema epoch); one racing the announcement of
// the change could still fail once, so they are counted and logged.
func (rc *reshardCluster) settleRouterReads(t *testing.T, ctx context.Context) int {
	t.Helper()
	conn := rc.routerConn(t, ctx)
	failed := 0
	for ok, tries := 0, 0; ok < 10; tries++ {
		if tries == 100 {
			t.Fatalf("reads of accounts through the router still fail after %d tries", tries)
		}
		rows, err := conn.Query(ctx, "SELECT id::text, name, note, payload FROM accounts")
		if err == nil {
			rows.Close()
			err = rows.Err()
		}
		switch {
		case err == nil:
			ok++
		case pgCode(err) == "0A000" && strings.Contains(err.Error(), "cached plan must not change result type"):
			failed, ok = failed+1, 0
		default:
			t.Fatalf("reading accounts through the router: %v", err)
		}
	}
	return failed
}
