package e2e

// The embedded Temporal server of `tessera dev` (dev/temporal): workflows,
// the Web UI, resuming from its database file, ports.

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	sdklog "go.temporal.io/sdk/log"
	sdktemporal "go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/dev/temporal"
)

const taskQueue = "tessera-test"

// timeout bounds each test; starting a server takes a few seconds.
const timeout = 2 * time.Minute

func testContext(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// start starts a server on free ports and stops it when the test ends.
func startTemporal(t *testing.T, cfg temporal.Config) *temporal.Server {
	t.Helper()
	cfg.FrontendPort, cfg.UIPort = -1, -1
	began := time.Now()
	srv, err := temporal.Start(testContext(t), cfg)
	if err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Logf("server up in %v: frontend %s, ui %q", time.Since(began).Round(time.Millisecond), srv.FrontendAddr(), srv.UIURL())
	t.Cleanup(func() {
		if err := srv.Stop(); err != nil {
			t.Errorf("Stop: %v", err)
		}
	})
	return srv
}

// connect returns an SDK client of srv's "default" namespace, with a worker
// of taskQueue running the test workflows and activities, and a function
// that stops both; the test's cleanup calls it too, before it stops srv.
func connectTemporal(t *testing.T, srv *temporal.Server) (client.Client, func()) {
	t.Helper()
	c, err := client.Dial(client.Options{
		HostPort:  srv.FrontendAddr(),
		Namespace: "default",
		Logger:    sdklog.NewStructuredLogger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	})
	if err != nil {
		t.Fatalf("client.Dial(%s): %v", srv.FrontendAddr(), err)
	}
	w := worker.New(c, taskQueue, worker.Options{})
	w.RegisterWorkflow(greetWorkflow)
	w.RegisterWorkflow(awaitSignalWorkflow)
	w.RegisterActivity(greetActivity)
	if err := w.Start(); err != nil {
		c.Close()
		t.Fatalf("worker.Start: %v", err)
	}
	stop := sync.OnceFunc(func() {
		w.Stop()
		c.Close()
	})
	// Registered after start's, so it runs before it.
	t.Cleanup(stop)
	return c, stop
}

func greetActivity(ctx context.Context, name string) (string, error) {
	return "hello, " + name + " (attempt " + strconv.Itoa(int(activity.GetInfo(ctx).Attempt)) + ")", nil
}

func activityOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: 10 * time.Second,
		RetryPolicy:         &sdktemporal.RetryPolicy{MaximumAttempts: 1},
	})
}

func greetWorkflow(ctx workflow.Context, name string) (string, error) {
	var out string
	err := workflow.ExecuteActivity(activityOptions(ctx), greetActivity, name).Get(ctx, &out)
	return out, err
}

// awaitSignalWorkflow greets, reports "waiting" to the "state" query, then
// waits for a "go" signal and returns the greeting and the signal's value.
func awaitSignalWorkflow(ctx workflow.Context, name string) (string, error) {
	state := "greeting"
	if err := workflow.SetQueryHandler(ctx, "state", func() (string, error) { return state, nil }); err != nil {
		return "", err
	}
	var greeting string
	if err := workflow.ExecuteActivity(activityOptions(ctx), greetActivity, name).Get(ctx, &greeting); err != nil {
		return "", err
	}
	state = "waiting"
	var sig string
	workflow.GetSignalChannel(ctx, "go").Receive(ctx, &sig)
	return greeting + "; signal " + sig, nil
}

// TestWorkflowAndUI runs a workflow and browses the UI on two servers at
// once: servers started in parallel in one process must not collide.
func TestWorkflowAndUI(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"first", "second"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			workflowAndUI(t)
		})
	}
}

func workflowAndUI(t *testing.T) {
	srv := startTemporal(t, temporal.Config{})
	c, disconnect := connectTemporal(t, srv)
	ctx := testContext(t)

	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: "greet", TaskQueue: taskQueue}, greetWorkflow, "tessera")
	if err != nil {
		t.Fatalf("ExecuteWorkflow: %v", err)
	}
	var got string
	if err := run.Get(ctx, &got); err != nil {
		t.Fatalf("workflow: %v", err)
	}
	if want := "hello, tessera (attempt 1)"; got != want {
		t.Errorf("workflow result = %q, want %q", got, want)
	}

	// The UI's page, and its API, which it serves from the frontend.
	if body := httpGet(t, srv.UIURL()+"/"); !strings.Contains(body, "<html") {
		t.Errorf("GET %s/: no HTML page: %.200q", srv.UIURL(), body)
	}
	body := httpGet(t, srv.UIURL()+"/api/v1/namespaces/default/workflows/greet")
	if !strings.Contains(body, `"greet"`) || !strings.Contains(strings.ToLower(body), "completed") {
		t.Errorf("the UI's API does not show workflow greet completed: %.500q", body)
	}

	frontend, ui := srv.FrontendAddr(), strings.TrimPrefix(srv.UIURL(), "http://")
	disconnect()
	if err := srv.Stop(); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	if err := srv.Stop(); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	for _, addr := range []string{frontend, ui} {
		ln, err := net.Listen("tcp", addr)
		if err != nil {
			t.Errorf("after Stop, %s is not free: %v", addr, err)
			continue
		}
		ln.Close()
	}
}

func httpGet(t *testing.T, url string) string {
	t.Helper()
	req, err := http.NewRequestWithContext(testContext(t), http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s: %.300q", url, resp.Status, body)
	}
	return string(body)
}

// resumeDBEnv, when set, makes TestResumeFromDBFile run its first half —
// start a server on that database file, start a workflow, stop — in a
// process of its own, as a first run of `tessera dev` would.
const resumeDBEnv = "TESSERA_TEST_TEMPORAL_RESUME_DB"

const resumeID = "await-signal"

func TestResumeFromDBFile(t *testing.T) {
	t.Parallel()
	if db := os.Getenv(resumeDBEnv); db != "" {
		firstRun(t, db)
		return
	}

	db := filepath.Join(t.TempDir(), "temporal.db")
	cmd := exec.CommandContext(testContext(t), os.Args[0], "-test.run=^TestResumeFromDBFile$", "-test.v")
	cmd.Env = append(os.Environ(), resumeDBEnv+"="+db)
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "--- PASS: TestResumeFromDBFile") {
		t.Fatalf("first run, in a child process: %v\n%s", err, out)
	}
	if _, err := os.Stat(db); err != nil {
		t.Fatalf("first run left no database: %v", err)
	}

	// Second run: this process, the same file, other ports.
	srv := startTemporal(t, temporal.Config{DBFile: db, DisableUI: true})
	if srv.UIURL() != "" {
		t.Errorf("UIURL() = %q with the UI disabled", srv.UIURL())
	}
	c, _ := connectTemporal(t, srv)
	ctx := testContext(t)
	if err := c.SignalWorkflow(ctx, resumeID, "", "go", "now"); err != nil {
		t.Fatalf("SignalWorkflow: %v", err)
	}
	var got string
	if err := c.GetWorkflow(ctx, resumeID, "").Get(ctx, &got); err != nil {
		t.Fatalf("workflow: %v", err)
	}
	// The greeting comes from the activity the first run executed.
	if want := "hello, resume (attempt 1); signal now"; got != want {
		t.Errorf("workflow result = %q, want %q", got, want)
	}
}

// firstRun starts a server on db, starts awaitSignalWorkflow and waits until
// it waits for its signal, then stops the server.
func firstRun(t *testing.T, db string) {
	srv := startTemporal(t, temporal.Config{DBFile: db, DisableUI: true})
	c, _ := connectTemporal(t, srv)
	ctx := testContext(t)
	if _, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{ID: resumeID, TaskQueue: taskQueue}, awaitSignalWorkflow, "resume"); err != nil {
		t.Fatalf("ExecuteWorkflow: %v", err)
	}
	for {
		var state string
		v, err := c.QueryWorkflow(ctx, resumeID, "", "state")
		if err == nil {
			err = v.Get(&state)
		}
		if err == nil && state == "waiting" {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("workflow never waited for its signal: state %q, %v", state, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	desc, err := c.DescribeWorkflowExecution(ctx, resumeID, "")
	if err != nil {
		t.Fatalf("DescribeWorkflowExecution: %v", err)
	}
	if st := desc.GetWorkflowExecutionInfo().GetStatus(); st != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
		t.Fatalf("workflow status %v, want running", st)
	}
	// The test's cleanups stop the worker, the client and the server.
}

// TestPortTaken checks that a port another program holds is an error from
// Start, naming the port, not a crash.
func TestPortTaken(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	port := ln.Addr().(*net.TCPAddr).Port
	for _, cfg := range []temporal.Config{
		{FrontendPort: port, UIPort: -1},
		{FrontendPort: -1, UIPort: port},
	} {
		srv, err := temporal.Start(testContext(t), cfg)
		if err == nil {
			srv.Stop()
			t.Errorf("Start(%+v) with port %d taken: no error", cfg, port)
			continue
		}
		if !strings.Contains(err.Error(), strconv.Itoa(port)) {
			t.Errorf("Start(%+v) with port %d taken: error %q does not name it", cfg, port, err)
		}
	}
}
