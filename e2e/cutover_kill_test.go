package e2e

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// cutoverKillSteps are the cutover's steps the general worker runs, in
// their order (workflows/reshard_cutover.go): each is where a worker
// dies once.
var cutoverKillSteps = []string{
	workflows.CheckCutoverActivity,
	workflows.SetTableBufferActivity,
	workflows.FenceSourcesActivity,
	// In a Replicator: the stream has applied the fence's marker.
	workflows.StreamChangesActivity,
	workflows.SetSequencesActivity,
	workflows.PrepareReverseActivity,
	workflows.SwitchTopologyActivity, // the point of no return
	workflows.UnfenceSourcesActivity, // after the switch: the new sources' fence
	workflows.WaitRoutersActivity,
	workflows.ClearTableBufferActivity,
}

// TestCutoverSurvivesKilledWorker is issue #14's "killed at each cutover
// step: it ends fully switched or fully back, never half". One reshard
// (shard-1 split to shard-2 and shard-3) under writers through the
// router; two general worker processes run the cutover's steps and two
// Replicator processes per shard its streams, as a fleet would. For each
// step in turn a SwitchTraffic or ReverseTraffic (whichever the state
// allows) runs until that step's activity has done its work and not
// reported it (stopAtStep); the server shows the attempt running; the
// process that ran it is killed (SIGKILL) while its twin runs on, and the
// history must show the step retried (or, with one attempt, timed out)
// after the kill. The update's caller just waits for its outcome: an
// accepted update outlives the worker that ran it (its error, when the
// cutover undid itself, says why). Then the movement is either fully
// switched (topology on the targets, the sources fenced, the reverse
// streams running) or fully back (topology on the source, no fence on
// it, the forward stream running), no table buffer is left, and every
// write the writers had acknowledged is where the router reads it. At
// the end no writer saw an error, and the reshard ends (Complete or
// Cancel) with every acknowledged write in place and nothing left. The
// kills' figures are logged (docs/operations.md), not asserted.
func TestCutoverSurvivesKilledWorker(t *testing.T) {
	began := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	sources, targets := []string{"shard-1"}, []string{"shard-2", "shard-3"}
	rc := newReshardCluster(t, ctx, append(slices.Clone(sources), targets...))
	// An admin records each shard's primary, then leaves: only the
	// killable workers may take the cutover's activities.
	rc.startWorker(t, ctx, "cutover-kill-admin").Stop(ctx)
	conns := map[string]string{}
	for _, s := range rc.shards {
		conns[s] = rc.connString(s)
	}
	armFile := filepath.Join(t.TempDir(), "stop-at")
	arm := func(step string) {
		if err := os.WriteFile(armFile, []byte(step), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	arm("")
	info := rc.c.Info()
	stops := make(chan stepStop, 4)
	started := 0
	var newReplicator func(shard string) *stepProc
	newReplicator = func(shard string) *stepProc {
		started++
		id := fmt.Sprintf("cutover-kill-%s-%d", shard, started)
		p := rc.startStepProc(t, stops, replicatorEnv, replicatorSpec{TemporalAddr: temporalSrv.FrontendAddr(), EtcdEndpoints: info.Etcd,
			Cluster: info.Cluster, Shard: shard, ID: id, ConnStrings: conns, StopAtFile: armFile}, store.KindReplicator, id)
		p.again = func() *stepProc { return newReplicator(shard) }
		return p
	}
	// Two of each, as a fleet runs: when the one running a step is
	// killed, the other is already polling.
	for _, s := range rc.shards {
		newReplicator(s)
		newReplicator(s)
	}
	var newWorker func() *stepProc
	newWorker = func() *stepProc {
		started++
		id := fmt.Sprintf("cutover-kill-worker-%d", started)
		p := rc.startStepProc(t, stops, workerEnv, workerSpec{TemporalAddr: temporalSrv.FrontendAddr(), EtcdEndpoints: info.Etcd, Cluster: info.Cluster,
			Secret: rc.c.Secret(), ID: id, ReplicatorPasswordFile: rc.pwFile, StopAtFile: armFile}, store.KindWorker, id)
		p.again = newWorker
		return p
	}
	newWorker()
	newWorker()

	hold := &sync.RWMutex{}
	clients := make([]*reshardClient, 2)
	var seedRows [3][][]any
	for i := range clients {
		clients[i] = newReshardClient(i, rc.routerConn(t, ctx), hold)
		rows := clients[i].seed(300)
		for tb := range rows {
			seedRows[tb] = append(seedRows[tb], rows[tb]...)
		}
	}
	src := rc.direct(t, ctx, sources[0])
	for tb, rows := range seedRows {
		if _, err := src.CopyFrom(ctx, pgx.Identifier{shardTables[tb].name}, []string{"id", "name", "note", "payload"}, textRows(rows)); err != nil {
			t.Fatal(err)
		}
	}
	writing, stopWriting := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for _, c := range clients {
		wg.Add(1)
		go func() { defer wg.Done(); c.run(writing) }()
	}
	defer func() { stopWriting(); wg.Wait() }()

	id := workflows.ReshardID("shop", "data")
	run, err := tc.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: id, TaskQueue: workflows.TaskQueue,
		WorkflowTaskTimeout: workflows.TaskTimeout(workflows.ReshardName)}, workflows.ReshardName,
		workflows.ReshardInput{Database: "shop", ShardGroup: "data", TargetKeyRanges: ranges(targets...)})
	if err != nil {
		t.Fatal(err)
	}
	awaitReady(t, ctx, run, "split 1→2", began)
	rc.checkCutoverState(t, ctx, "before the first cutover", sources, targets, false)

	switched := false
	var figures []string
	for _, step := range cutoverKillSteps {
		action := workflows.SwitchTrafficUpdate
		if switched {
			action = workflows.ReverseTrafficUpdate
		}
		arm(step)
		errsBefore := writerErrors(clients)
		asked := time.Now()
		for _, c := range clients {
			c.resetGap(asked)
		}
		answer := make(chan error, 1)
		go func() {
			uctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
			defer cancel()
			for {
				handle, err := tc.UpdateWorkflow(uctx, client.UpdateWorkflowOptions{WorkflowID: id, UpdateName: action,
					WaitForStage: client.WorkflowUpdateStageCompleted})
				if err == nil {
					err = handle.Get(uctx, nil)
				}
				// The streams too far behind the writers for a short
				// cutover (CheckCutover): asked again, as an operator would.
				var appErr *temporal.ApplicationError
				if errors.As(err, &appErr) && appErr.Type() == pgerr.ObjectNotInPrerequisiteState && uctx.Err() == nil {
					t.Logf("%s refused: %s", action, appErr.Message())
					time.Sleep(2 * time.Second)
					continue
				}
				answer <- err
				return
			}
		}()
		var stop stepStop
		select {
		case stop = <-stops:
			if stop.step != step {
				t.Fatalf("%s: %s stopped at %s, armed for %s", action, stop.proc.name, stop.step, step)
			}
		case err := <-answer:
			t.Fatalf("%s ended (%v) without running %s", action, err, step)
		case <-time.After(2 * time.Minute):
			t.Fatalf("%s did not reach %s", action, step)
		}
		attempt, running := startedActivity(t, ctx, id, step)
		if !running {
			t.Fatalf("%s: the worker stopped in %s but the server shows no attempt of it running", action, step)
		}
		arm("")
		stop.proc.kill(t)
		killed := time.Now()
		killedProcs := []*stepProc{stop.proc}
		// Two streams may reach their markers at once: each of their
		// processes is killed in the step.
	more:
		for {
			select {
			case other := <-stops:
				if other.step != step {
					t.Fatalf("%s: %s stopped at %s, armed for %s", action, other.proc.name, other.step, step)
				}
				other.proc.kill(t)
				killedProcs = append(killedProcs, other.proc)
			case <-time.After(200 * time.Millisecond):
				break more
			}
		}
		var uerr error
		select {
		case uerr = <-answer:
		case <-ctx.Done():
			t.Fatalf("%s killed at %s: no answer", action, step)
		}
		answered := time.Now()
		phase := ""
		eventually(t, time.Minute, "the cutover ends", func() error {
			phase = reshardProgress(t, ctx, id).Phase
			if phase == workflows.PhaseSwitching {
				return fmt.Errorf("phase %s", phase)
			}
			return nil
		})
		switch phase {
		case workflows.PhaseSwitched:
			switched = true
		case workflows.PhaseReadyForCutover:
			switched = false
		default:
			t.Fatalf("%s killed at %s: phase %s", action, step, phase)
		}
		ended := "fully back"
		if switched {
			ended = "fully switched"
		}
		rc.checkCutoverState(t, ctx, action+" killed at "+step, sources, targets, switched)
		live := sources
		if switched {
			live = targets
		}
		rc.checkRowsOn(t, ctx, hold, clients, action+" killed at "+step, live)
		var gaps []time.Duration
		for _, c := range clients {
			gap, _ := c.gapSince(answered)
			gaps = append(gaps, gap.Round(time.Millisecond))
		}
		pause := "no switch"
		if rep := reshardProgress(t, ctx, id).Cutover; rep != nil && rep.Reverse == !switched && rep.Switched.After(asked) {
			pause = fmt.Sprintf("write pause (fence to switch) %s, buffer held %s", rep.WritePause().Round(time.Millisecond), rep.BufferHeld().Round(time.Millisecond))
		}
		fig := fmt.Sprintf("%s: %s killed in %s (attempt %d): %s; answered %s after the kill (error: %v); %s; writers' longest gaps %v, errors %d",
			action, stop.proc.name, step, attempt, ended, answered.Sub(killed).Round(time.Millisecond), uerr, pause, gaps, writerErrors(clients)-errsBefore)
		t.Log(fig)
		hist := timeline(t, ctx, id, killed)
		t.Logf("history since the kill: %s", hist)
		// The killed attempt was the one that ended: a new attempt ran
		// after the kill, or the only one timed out.
		if !regexp.MustCompile(`ActivityTaskStarted#([2-9]|\d\d)\[` + step + `\]|ActivityTaskTimedOut\[` + step + `\]`).MatchString(hist) {
			t.Errorf("%s: no attempt of %s after the kill, none timed out: the kill was not in the step", action, step)
		}
		figures = append(figures, fig)
		for _, p := range killedProcs {
			p.again()
		}
	}

	stopWriting()
	wg.Wait()
	if switched {
		cutoverUpdate(t, ctx, id, workflows.CompleteUpdate)
	} else if err := tc.SignalWorkflow(ctx, id, "", workflows.CancelSignal, nil); err != nil {
		t.Fatal(err)
	}
	var res workflows.ReshardResult
	if err := run.Get(ctx, &res); err != nil || (res.Phase != workflows.PhaseCompleted && res.Phase != workflows.PhaseCancelled) {
		t.Fatalf("the reshard ended %+v, %v", res, err)
	}
	if res.Phase == workflows.PhaseCancelled {
		rc.truncate(t, ctx, ranges(targets...))
	}
	rc.checkRows(t, ctx, hold, clients, "after the reshard ended")
	rc.checkNothingLeft(t, ctx, "after the reshard ended")
	total, cutOff := 0, 0
	for _, c := range clients {
		total += c.acked
		cutOff += len(c.uncertain) - len(c.errs)
		for _, e := range c.errs {
			t.Errorf("writer %d: %s", c.id, e)
		}
		for _, a := range c.anomalies {
			t.Errorf("writer %d: %s", c.id, a)
		}
	}
	t.Logf("%d kills, %d acknowledged writes (%d cut off by the writers' stop, not compared), reshard %s; %s in all",
		len(cutoverKillSteps), total, cutOff, res.Phase, time.Since(began).Round(time.Second))
	for _, f := range figures {
		t.Log(f)
	}
}

func writerErrors(clients []*reshardClient) int {
	n := 0
	for _, c := range clients {
		c.mu.Lock()
		n += len(c.errs)
		c.mu.Unlock()
	}
	return n
}

// checkCutoverState checks that the movement between sources and
// targets is wholly on one side: the group routed there, no fence there
// and, when switched, the sources fenced; that side's streams running
// and no other; no table buffer; the router on the current topology.
func (rc *reshardCluster) checkCutoverState(t *testing.T, ctx context.Context, name string, sources, targets []string, switched bool) {
	t.Helper()
	live, idle := sources, targets
	if switched {
		live, idle = targets, sources
	}
	g, ok := rc.top().Group("data")
	if !ok {
		t.Fatalf("%s: no group data", name)
	}
	var routed []string
	for _, r := range g.KeyRanges {
		routed = append(routed, r.ShardUID)
	}
	if !slices.Equal(routed, live) {
		t.Errorf("%s: the group routes to %v, want %v (switched %v): half", name, routed, live, switched)
	}
	fences := func(shard string) int {
		var n int
		if err := rc.direct(t, ctx, shard).QueryRow(ctx, "SELECT count(*) FROM pg_trigger WHERE NOT tgisinternal AND tgname LIKE '%_fence'").Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}
	for _, s := range live {
		if n := fences(s); n != 0 {
			t.Errorf("%s: %d fence triggers on %s, which the group routes to: half", name, n, s)
		}
	}
	if switched {
		for _, s := range sources {
			if n := fences(s); n != len(shardTables) {
				t.Errorf("%s: %d fence triggers on source %s after the switch, want %d", name, n, s, len(shardTables))
			}
		}
	}
	if bufs, err := rc.c.Store().ListTableBuffers(ctx); err != nil || len(bufs) != 0 {
		t.Errorf("%s: table buffers left: %+v (%v)", name, bufs, err)
	}
	// The live side's streams run (the replicators restart them within
	// their retry interval), the idle side's do not.
	eventually(t, time.Minute, name+": the streams from "+fmt.Sprint(live)+" run", func() error {
		for _, group := range [][]string{live, idle} {
			want := 0
			if slices.Equal(group, live) {
				want = 1
			}
			for _, s := range group {
				var n int
				if err := rc.direct(t, ctx, s).QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots WHERE active").Scan(&n); err != nil {
					return err
				}
				if n != want {
					return fmt.Errorf("%d active slots on %s, want %d", n, s, want)
				}
			}
		}
		return nil
	})
	snap, err := rc.c.Store().GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, name+": the router applies the topology", func() error {
		recs, err := rc.c.Store().ListRecords(ctx, store.KindRouter)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.TopologyRevision < snap.Revision {
				return fmt.Errorf("router %s at revision %d, topology %d", r.ID, r.TopologyRevision, snap.Revision)
			}
		}
		return nil
	})
}

// connString is a shard primary's shop database, past the router.
func (rc *reshardCluster) connString(shard string) string {
	for _, s := range rc.c.Info().Shards {
		if s.UID == shard {
			return fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/shop?sslmode=disable", s.Instances[0].Port)
		}
	}
	return ""
}
