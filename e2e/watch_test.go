package e2e

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	workflowpb "go.temporal.io/api/workflow/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"
	temporalsdk "go.temporal.io/sdk/temporal"
	sdkworker "go.temporal.io/sdk/worker"
	sdkwf "go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/cli"
	"github.com/tesseradb/tessera/dev/temporal"
	"github.com/tesseradb/tessera/replicator/actions"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/worker"
	"github.com/tesseradb/tessera/workflows"
)

// runCLI runs a tessera command in-process against the package's
// Temporal server.
func runCLI(ctx context.Context, args ...string) (stdout, stderr string, code int) {
	var out, errOut bytes.Buffer
	args = append(args, "--temporal", temporalSrv.FrontendAddr())
	code = cli.RunContext(ctx, args, &out, &errOut, cli.Options{})
	return out.String(), errOut.String(), code
}

// TestWatchReshard follows a reshard the way an operator does: `tessera
// reshard` starts it and shows its progress until it is ready for the
// cutover; the run is listed with its summary and found by its
// TesseraPhase; its activities carry summaries naming their shards;
// `tessera workflow show` and `tessera vdiff` say where it stands;
// --switch-traffic is refused (the cutover is planned) and --cancel ends
// it, leaving no slot behind. Real Temporal, real Replicator activities,
// real Postgres (each shard a database of the test's own instance).
func TestWatchReshard(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	pg := reshardPostgres(t, ctx)
	dbOf := func(shard string) string { return "watch_" + shard }
	admin, err := pgx.Connect(ctx, pg.ConnConfig("postgres", ""))
	if err != nil {
		t.Fatal(err)
	}
	defer admin.Close(context.Background())
	conns := map[string]*pgx.Conn{}
	for _, s := range []string{"s1", "t1", "t2"} {
		if _, err := admin.Exec(ctx, "CREATE DATABASE "+dbOf(s)); err != nil {
			t.Fatal(err)
		}
		c, err := pgx.Connect(ctx, pg.ConnConfig(dbOf(s), ""))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close(context.Background())
		if _, err := c.Exec(ctx, `CREATE TABLE customers (customer_id int8 PRIMARY KEY, name text)`); err != nil {
			t.Fatal(err)
		}
		conns[s] = c
	}
	src := conns["s1"]
	if _, err := src.Exec(ctx, `INSERT INTO customers SELECT i, 'c' || i FROM generate_series(1, 20000) i`); err != nil {
		t.Fatal(err)
	}
	st, err := store.Dial(ctx, cluster.Info().Etcd, "watch-e2e")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	top, err := topo.Parse([]byte(reshardTopology))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyTopology(ctx, top, store.ApplyOptions{Force: true}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []string{"s1", "t1", "t2"} {
		if _, err := st.UpdateShardState(ctx, s, func(ss *store.ShardState) error { ss.Primary = s + "-0"; return nil }); err != nil {
			t.Fatal(err)
		}
	}
	// A worker of its own on a task queue of its own (--task-queue).
	const queue = "watch-e2e"
	w := sdkworker.New(tc, queue, sdkworker.Options{})
	workflows.Register(w, storeActivities(st))
	acts := &actions.Actions{Store: st, Conn: actions.ConnectorFunc(func(_ context.Context, shard, _ string) (string, error) {
		return pg.ConnConfig(dbOf(shard), ""), nil
	})}
	acts.Register(w)
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	// Writes all along, so the streams have something to catch up on;
	// paced, so that they can on a loaded test machine.
	// Their own connection: a cancelled statement closes it.
	writer, err := pgx.Connect(ctx, pg.ConnConfig(dbOf("s1"), ""))
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Close(context.Background())
	writes, stopWrites := context.WithCancel(ctx)
	defer stopWrites()
	go func() {
		for n := 0; writes.Err() == nil; n++ {
			if _, err := writer.Exec(writes, `UPDATE customers SET name = name || '+' WHERE customer_id = $1`, n%20000+1); err != nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()

	id := workflows.ReshardID("shop", "data")
	out, progress, code := runCLI(ctx, "reshard", "--task-queue", queue, "--database", "shop", "--shard-group", "data",
		"--target", "t1=-80", "--target", "t2=80-")
	stopWrites()
	t.Logf("tessera reshard: exit %d\nstdout:\n%s\nstderr:\n%s", code, out, progress)
	if code != 0 || !strings.Contains(out, id+" is ready for the cutover") || !strings.Contains(out, "last VDiff: 0 differences") {
		t.Fatalf("tessera reshard: exit %d, stdout %q", code, out)
	}
	// Not a terminal: plain lines, one per change, ending ready.
	lines := strings.Split(strings.TrimSpace(progress), "\n")
	last := lines[len(lines)-1]
	if strings.ContainsAny(progress, "\r\x1b") || len(lines) < 2 || !strings.HasPrefix(lines[0], "started workflow "+id) ||
		!strings.Contains(last, "phase ready_for_cutover | rows copied 20000 of ~") || !strings.Contains(last, " | lag ") || !strings.HasSuffix(last, "| VDiff 0 differences") {
		t.Fatalf("progress lines:\n%s", progress)
	}

	// The UI's list filters by phase.
	if runs := listed(t, fmt.Sprintf(`%s = "%s" AND WorkflowId = "%s"`, workflows.PhaseAttribute, workflows.PhaseReadyForCutover, id)); len(runs) != 1 {
		t.Fatalf("%s = %q lists %d runs of %s", workflows.PhaseAttribute, workflows.PhaseReadyForCutover, len(runs), id)
	}
	summary := "Reshard shop.data to t1 [, 80), t2 [80, )"
	// Activities carry summaries naming their tables and shards.
	summaries := activitySummaries(t, ctx, id)
	for _, want := range []string{
		"plan: Reshard shop.data",
		"copy public.customers from s1 to [t1 t2]",
		"stream public.customers from s1 to [t1 t2]",
		"VDiff public.customers: [s1] against [t1 t2]",
	} {
		if !summaries[want] {
			t.Errorf("no activity with summary %q; have %v", want, summaries)
		}
	}

	out, _, code = runCLI(ctx, "workflow", "show", id)
	for _, want := range []string{"type:      Reshard\n", "status:    running\n", "phase:     ready_for_cutover\n",
		"summary:   " + summary + "\n", "progress:  phase ready_for_cutover | rows copied 20000",
		"**Reshard shop.data**: ready_for_cutover", "- last VDiff: 0 differences over 1 tables (done: true)"} {
		if code != 0 || !strings.Contains(out, want) {
			t.Errorf("workflow show: exit %d, output lacks %q:\n%s", code, want, out)
		}
	}
	out, _, code = runCLI(ctx, "vdiff", "--database", "shop", "--shard-group", "data")
	if code != 0 || !strings.Contains(out, "last VDiff 0 differences") || !strings.Contains(out, "public.customers  true") ||
		!strings.Contains(out, "20000        20000        0") {
		t.Errorf("vdiff: exit %d:\n%s", code, out)
	}

	// The cutover (--switch-traffic) is other tests' subject; here the
	// reshard is cancelled before it.
	out, _, code = runCLI(ctx, "reshard", "--database", "shop", "--shard-group", "data", "--cancel")
	if code != 0 || !strings.HasPrefix(out, id+": cancelled\n") {
		t.Fatalf("--cancel: exit %d, stdout %q", code, out)
	}
	out, _, code = runCLI(ctx, "workflow", "show", id)
	if code != 0 || !strings.Contains(out, "status:    completed\n") || !strings.Contains(out, "phase:     cancelled\n") {
		t.Errorf("workflow show after the cancel: exit %d:\n%s", code, out)
	}
	var slots int64
	if err := src.QueryRow(ctx, "SELECT count(*) FROM pg_replication_slots").Scan(&slots); err != nil || slots != 0 {
		t.Fatalf("after --cancel: %d slots on the source (%v)", slots, err)
	}
	if _, stderr, code := runCLI(ctx, "workflow", "show", "no-such-workflow"); code != 1 || !strings.Contains(stderr, "(SQLSTATE 42704)") {
		t.Errorf("show of an unknown workflow: exit %d, stderr %q", code, stderr)
	}
	// A reshard its plan refuses ends the command with the refusal.
	_, stderr, code := runCLI(ctx, "reshard", "--task-queue", queue, "--database", "shop", "--shard-group", "nosuch", "--target", "t1=-")
	if code != 1 || !strings.Contains(stderr, `shard group "nosuch" does not exist`) || !strings.Contains(stderr, "(SQLSTATE 42704)") {
		t.Errorf("a refused reshard: exit %d, stderr %q", code, stderr)
	}
}

// listed returns the runs a visibility query lists, once it lists any
// (visibility is updated a moment after the run): what the Web UI's
// workflow list shows for the same query.
func listed(t *testing.T, query string) []*workflowpb.WorkflowExecutionInfo {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		res, err := tc.ListWorkflow(context.Background(), &workflowservice.ListWorkflowExecutionsRequest{Query: query})
		if err != nil {
			t.Fatalf("listing %s: %v", query, err)
		}
		if len(res.Executions) > 0 {
			return res.Executions
		}
		if time.Now().After(deadline) {
			t.Fatalf("no run listed for %s", query)
		}
	}
}

// activitySummaries returns the summaries of the activities a workflow
// scheduled, from its history.
func activitySummaries(t *testing.T, ctx context.Context, id string) map[string]bool {
	t.Helper()
	out := map[string]bool{}
	it := tc.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if ev.GetEventType() != enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED || ev.GetUserMetadata().GetSummary() == nil {
			continue
		}
		var s string
		if err := converter.GetDefaultDataConverter().FromPayload(ev.GetUserMetadata().GetSummary(), &s); err != nil {
			t.Fatal(err)
		}
		out[s] = true
	}
	return out
}

// TestWorkerRegistersSearchAttributes: on a server whose namespace lacks
// TesseraPhase, a worker registers it before it polls; on one that has it
// (the embedded server creates its namespaces with it), nothing changes.
func TestWorkerRegistersSearchAttributes(t *testing.T) {
	t.Parallel()
	ctx := testContext(t)
	bare := startTemporal(t, temporal.Config{DisableUI: true})
	withAttrs := startTemporal(t, temporal.Config{DisableUI: true, SearchAttributes: workflows.SearchAttributes})
	for _, c := range []struct {
		srv      *temporal.Server
		haveFrom bool
	}{{bare, false}, {withAttrs, true}} {
		tcl, err := client.Dial(client.Options{HostPort: c.srv.FrontendAddr()})
		if err != nil {
			t.Fatal(err)
		}
		defer tcl.Close()
		has := func() bool {
			res, err := tcl.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: "default"})
			if err != nil {
				t.Fatal(err)
			}
			return res.GetCustomAttributes()[workflows.PhaseAttribute] == enumspb.INDEXED_VALUE_TYPE_KEYWORD
		}
		if has() != c.haveFrom {
			t.Fatalf("%s: TesseraPhase registered from the start: %v, want %v", c.srv.FrontendAddr(), !c.haveFrom, c.haveFrom)
		}
		for range 2 { // the second time finds it there
			if err := worker.EnsureSearchAttributes(ctx, tcl, "default"); err != nil {
				t.Fatal(err)
			}
			if !has() {
				t.Fatalf("%s: TesseraPhase not registered", c.srv.FrontendAddr())
			}
		}
		// A workflow that sets it at once, before the server's caches
		// know it, is held up a moment at most.
		w := sdkworker.New(tcl, "phase-test", sdkworker.Options{})
		w.RegisterWorkflowWithOptions(setPhaseWorkflow, sdkwf.RegisterOptions{Name: "SetPhase"})
		if err := w.Start(); err != nil {
			t.Fatal(err)
		}
		defer w.Stop()
		run, err := tcl.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: "phase-test"}, "SetPhase")
		if err != nil {
			t.Fatal(err)
		}
		if err := run.Get(ctx, nil); err != nil {
			t.Fatalf("%s: a workflow setting TesseraPhase: %v", c.srv.FrontendAddr(), err)
		}
		d, err := tcl.DescribeWorkflow(ctx, run.GetID(), run.GetRunID())
		if err != nil {
			t.Fatal(err)
		}
		if phase, ok := d.TypedSearchAttributes.GetKeyword(phaseKey); !ok || phase != "copying" {
			t.Errorf("%s: TesseraPhase %q, %v", c.srv.FrontendAddr(), phase, ok)
		}
	}
}

var phaseKey = temporalsdk.NewSearchAttributeKeyKeyword(workflows.PhaseAttribute)

// setPhaseWorkflow sets TesseraPhase as Tessera's workflows do.
func setPhaseWorkflow(ctx sdkwf.Context) error {
	return sdkwf.UpsertTypedSearchAttributes(ctx, phaseKey.ValueSet("copying"))
}
