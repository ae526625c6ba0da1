package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/spf13/cobra"
	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/tesseradb/tessera/dev"
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/tlsfiles"
	"github.com/tesseradb/tessera/workflows"
	"github.com/tesseradb/tessera/workflows/launch"
)

// defaultTemporal is Temporal's usual frontend address.
const defaultTemporal = "127.0.0.1:7233"

// temporalFlags are the flags of every command that talks to Temporal.
// Without --temporal (or TESSERA_TEMPORAL), a dev cluster's cluster.json
// says where its embedded server listens.
type temporalFlags struct {
	addr      string
	namespace string
	tls       tlsfiles.Client
	dataDir   *string
}

// register adds the flags; dataDir is the command's --data when it has
// one already (from clusterFlags), else --data is added here.
func (f *temporalFlags) register(cmd *cobra.Command, dataDir *string) {
	fl := cmd.Flags()
	fl.StringVar(&f.addr, "temporal", os.Getenv("TESSERA_TEMPORAL"),
		"Temporal frontend host:port (env TESSERA_TEMPORAL; default: the dev cluster's, else "+defaultTemporal+")")
	fl.StringVar(&f.namespace, "namespace", envOr("TESSERA_NAMESPACE", "default"), "Temporal namespace (env TESSERA_NAMESPACE)")
	tlsClientFlags(fl, "temporal", "Temporal", &f.tls)
	if dataDir == nil {
		dataDir = new(string)
		fl.StringVar(dataDir, "data", ".tessera", "a dev cluster's data directory, read for Temporal's address when --temporal is not given")
	}
	f.dataDir = dataDir
}

// address is the frontend to use.
func (f *temporalFlags) address() string {
	if f.addr != "" {
		return f.addr
	}
	if info, err := dev.ReadInfo(*f.dataDir); err == nil && info.Temporal != "" {
		return info.Temporal
	}
	return defaultTemporal
}

// dial connects to Temporal, failing at once when it does not answer.
func (f *temporalFlags) dial(ctx context.Context) (client.Client, error) {
	addr := f.address()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	tlsConfig, err := f.tls.Config()
	if err != nil {
		return nil, err
	}
	c, err := client.DialContext(ctx, client.Options{
		HostPort:          addr,
		Namespace:         f.namespace,
		ConnectionOptions: client.ConnectionOptions{TLS: tlsConfig},
		// The SDK logs every start and retry; failures come back as errors.
		Logger: tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
	})
	if err != nil {
		return nil, pgerr.New("08001", "cannot reach Temporal at %s: %v (run `tessera dev`, or give --temporal)", addr, err)
	}
	return c, nil
}

// summarized is an input that says in one line what its workflow does:
// the summary the Temporal UI lists the run with.
type summarized interface{ Summary() string }

// startOp starts an operation's workflow under its fixed id, on queue. If
// one with that id already runs, it says so and follows that one instead:
// the id allows one operation per shard at a time.
func startOp(ctx context.Context, w io.Writer, c client.Client, id, queue, workflow string, input any) (client.WorkflowRun, error) {
	var summary string
	if s, ok := input.(summarized); ok {
		summary = s.Summary()
	}
	run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		ID:                                       id,
		TaskQueue:                                queue,
		WorkflowTaskTimeout:                      workflows.TaskTimeout(workflow),
		StaticSummary:                            summary,
		WorkflowIDConflictPolicy:                 enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		WorkflowIDReusePolicy:                    enumspb.WORKFLOW_ID_REUSE_POLICY_ALLOW_DUPLICATE,
		WorkflowExecutionErrorWhenAlreadyStarted: true,
	}, workflow, input)
	var running *serviceerror.WorkflowExecutionAlreadyStarted
	if errors.As(err, &running) {
		fmt.Fprintf(w, "workflow %s is already running; following it\n", id)
		return c.GetWorkflow(ctx, id, ""), nil
	}
	if err != nil {
		return nil, fmt.Errorf("starting workflow %s: %w", id, err)
	}
	fmt.Fprintf(w, "started workflow %s (run %s)\n", id, run.GetRunID())
	return run, nil
}

// stepPoll is how often follow asks a workflow for its step.
const stepPoll = 250 * time.Millisecond

// follow prints a workflow's step whenever it changes, until the
// workflow ends, and decodes its result into out.
func follow(ctx context.Context, w io.Writer, c client.Client, run client.WorkflowRun, out any) error {
	started := time.Now()
	done := make(chan error, 1)
	go func() { done <- run.Get(ctx, out) }()
	t := time.NewTicker(stepPoll)
	defer t.Stop()
	last := ""
	for {
		select {
		case err := <-done:
			return launch.WorkflowError(run.GetID(), err)
		case <-t.C:
		}
		qctx, cancel := context.WithTimeout(ctx, time.Second)
		v, err := c.QueryWorkflow(qctx, run.GetID(), run.GetRunID(), workflows.StepQuery)
		cancel()
		// Until a worker has taken the workflow, queries fail; the
		// result says what happened in the end anyway.
		var step string
		if err != nil || v.Get(&step) != nil || step == last {
			continue
		}
		last = step
		fmt.Fprintf(w, "%6.2fs  %s\n", time.Since(started).Seconds(), step)
	}
}

// workflowError turns a workflow's failure into the error it carries,
// with its SQLSTATE (launch.WorkflowError).
func workflowError(id string, err error) error { return launch.WorkflowError(id, err) }
