package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/workflows"
)

// reshardFlags are `tessera reshard`'s own flags.
type reshardFlags struct {
	temporal      temporalFlags
	database      string
	group         string
	targets       []string
	inputFile     string
	maxLag        int64
	batchRows     int
	queue         string
	switchTraffic bool
	cancel        bool
	wait          bool
	asJSON        bool

	// The other updates of a running reshard; reads makes SwitchTraffic
	// and ReverseTraffic move replica reads only.
	reverseTraffic bool
	complete       bool
	reads          bool
}

// acting says whether the command acts on a running reshard.
func (f *reshardFlags) acting() bool {
	return f.switchTraffic || f.reverseTraffic || f.complete || f.cancel
}

func newReshardCommand() *cobra.Command {
	var f reshardFlags
	cmd := &cobra.Command{
		Use:   "reshard --database DB --shard-group GROUP --target SHARD=START-END... | --input FILE",
		Short: "Move a shard group's key ranges to new shards (the Reshard workflow), showing its progress",
		Long: `Start the Reshard workflow of a shard group and show its progress until it is
ready for the cutover: the phase, the rows copied, the streams' lag and the
last VDiff's result. On a terminal the line is redrawn in place; otherwise a
line is printed each time the progress changes.

Each --target is a target shard and its key range, hexadecimal prefixes of the
shard key's hash as in the topology, an empty bound unbounded:
  tessera reshard --database shop --shard-group data --target t1=-80 --target t2=80-
--input reads a whole ReshardInput as JSON instead (docs/operations.md).

If the group's reshard already runs, this command follows it. With
--switch-traffic, --reverse-traffic, --complete or --cancel (and the same
--database and --shard-group) it acts on the running reshard instead:
--switch-traffic moves the group's reads and writes to the targets,
--reverse-traffic moves them back, --complete ends a switched reshard and
deletes the moved rows from the sources, --cancel stops a reshard that has
not switched and drops what it created on every instance.
--switch-traffic --reads moves only replica reads (sessions with
SET tessera.target = 'replica') to the targets' replicas, ahead of the
writes; --reverse-traffic --reads puts them back on the sources.
Watch it in the Temporal UI too: the workflow list filters on
TesseraPhase="ready_for_cutover".`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := f.input()
			if err != nil {
				return err
			}
			id := workflows.ReshardID(in.Database, in.ShardGroup)
			ctx := cmd.Context()
			c, err := f.temporal.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			traffic := workflows.TrafficInput{}
			if f.reads {
				traffic.Traffic = workflows.TrafficReads
			}
			switch {
			case f.switchTraffic && f.reads:
				return sendUpdate(cmd, c, id, workflows.SwitchTrafficUpdate, "replica reads switched to the targets; writes stay on the sources", traffic)
			case f.switchTraffic:
				return sendUpdate(cmd, c, id, workflows.SwitchTrafficUpdate, "traffic switched", traffic)
			case f.reverseTraffic && f.reads:
				return sendUpdate(cmd, c, id, workflows.ReverseTrafficUpdate, "replica reads back on the sources", traffic)
			case f.reverseTraffic:
				return sendUpdate(cmd, c, id, workflows.ReverseTrafficUpdate, "traffic moved back to the sources", traffic)
			case f.complete:
				return sendUpdate(cmd, c, id, workflows.CompleteUpdate, "completed")
			case f.cancel:
				return cancelReshard(cmd, c, id, f.wait)
			}
			run, err := startOp(ctx, cmd.ErrOrStderr(), c, id, f.queue, workflows.ReshardName, in)
			if err != nil || !f.wait {
				return err
			}
			prog, err := followReshard(ctx, newLiveLine(cmd.ErrOrStderr()), c, run)
			if err != nil {
				return err
			}
			if f.asJSON {
				return printResult(cmd.OutOrStdout(), true, prog, nil)
			}
			printReshardOutcome(cmd, id, prog)
			return nil
		},
	}
	f.temporal.register(cmd, nil)
	fl := cmd.Flags()
	fl.StringVar(&f.database, "database", "", "the database whose shard group moves")
	fl.StringVar(&f.group, "shard-group", "", "the shard group that moves")
	fl.StringArrayVar(&f.targets, "target", nil, "a target shard and its key range, SHARD=START-END (repeat for each target)")
	fl.StringVar(&f.inputFile, "input", "", "a JSON file holding the ReshardInput, instead of --database, --shard-group and --target")
	fl.IntVar(&f.batchRows, "copy-batch-rows", 0, "rows per copy batch, 1 to 1000000 (default: the worker's, 10000)")
	fl.Int64Var(&f.maxLag, "max-lag-bytes", 0, "the catch-up ends when every stream is within this many WAL bytes of its source (default 1 MiB)")
	fl.StringVar(&f.queue, "task-queue", workflows.TaskQueue, "the task queue of the workers that run it")
	fl.BoolVar(&f.switchTraffic, "switch-traffic", false, "ask the running reshard for its cutover to the targets")
	fl.BoolVar(&f.reverseTraffic, "reverse-traffic", false, "move a switched reshard's traffic back to the sources")
	fl.BoolVar(&f.reads, "reads", false, "with --switch-traffic or --reverse-traffic: move only replica reads (tessera.target = replica)")
	fl.BoolVar(&f.complete, "complete", false, "end a switched reshard: delete the moved rows from the sources and what the reshard made")
	fl.BoolVar(&f.cancel, "cancel", false, "cancel the running reshard: its streams stop and what it created is dropped")
	fl.BoolVar(&f.wait, "wait", true, "show the progress until the reshard is ready for the cutover or ends; --wait=false only starts it")
	fl.BoolVar(&f.asJSON, "json", false, "print the last progress as JSON")
	cmd.MarkFlagsMutuallyExclusive("switch-traffic", "reverse-traffic", "complete", "cancel")
	cmd.MarkFlagsMutuallyExclusive("input", "target")
	return cmd
}

// input is the ReshardInput the flags or the file give.
func (f *reshardFlags) input() (workflows.ReshardInput, error) {
	var in workflows.ReshardInput
	if f.inputFile != "" {
		raw, err := os.ReadFile(f.inputFile)
		if err != nil {
			return in, pgerr.New("58P01", "--input: %v", err) // undefined_file
		}
		dec := json.NewDecoder(strings.NewReader(string(raw)))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			return in, pgerr.New(pgerr.InvalidParameterValue, "--input %s: %v", f.inputFile, err)
		}
		if in.Resume != nil {
			return in, pgerr.New(pgerr.InvalidParameterValue, "--input %s: resume is set only by the workflow itself", f.inputFile)
		}
	}
	// Flags given beside a file override it.
	if f.database != "" {
		in.Database = f.database
	}
	if f.group != "" {
		in.ShardGroup = f.group
	}
	if f.batchRows != 0 {
		in.CopyBatchRows = f.batchRows
	}
	if f.maxLag != 0 {
		in.MaxLagBytes = f.maxLag
	}
	for _, t := range f.targets {
		shard, keyRange, ok := strings.Cut(t, "=")
		start, end, dash := strings.Cut(keyRange, "-")
		if !ok || !dash || shard == "" {
			return in, pgerr.New(pgerr.InvalidParameterValue, "--target %q: want SHARD=START-END, e.g. t1=-80 or t2=80-", t)
		}
		in.TargetKeyRanges = append(in.TargetKeyRanges, workflows.KeyRangeInput{ShardUID: shard, Start: start, End: end})
	}
	if in.Database == "" || in.ShardGroup == "" {
		return in, pgerr.New(pgerr.InvalidParameterValue, "--database and --shard-group (or an --input file naming them) are required")
	}
	if f.reads && !f.switchTraffic && !f.reverseTraffic {
		return in, pgerr.New(pgerr.InvalidParameterValue, "--reads goes with --switch-traffic or --reverse-traffic")
	}
	if len(in.TargetKeyRanges) == 0 && !f.acting() {
		return in, pgerr.New(pgerr.InvalidParameterValue, "at least one --target (or an --input file with target_key_ranges) is required")
	}
	return in, nil
}

// cancelReshard sends the Cancel signal and, with wait, waits for the
// reshard to have dropped what it created.
func cancelReshard(cmd *cobra.Command, c client.Client, id string, wait bool) error {
	ctx := cmd.Context()
	if err := c.SignalWorkflow(ctx, id, "", workflows.CancelSignal, nil); err != nil {
		return workflowError(id, notFound(id, err))
	}
	fmt.Fprintf(cmd.ErrOrStderr(), "%s: cancel requested\n", id)
	if !wait {
		return nil
	}
	var res workflows.ReshardResult
	if err := c.GetWorkflow(ctx, id, "").Get(ctx, &res); err != nil {
		return workflowError(id, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", id, res.Phase)
	printSteps(cmd.OutOrStdout(), res.Steps)
	return nil
}

// followReshard shows a reshard's progress until it is ready for the
// cutover or ends, and returns the last progress.
func followReshard(ctx context.Context, line *liveLine, c client.Client, run client.WorkflowRun) (workflows.ReshardProgress, error) {
	defer line.done()
	ended := make(chan error, 1)
	go func() { ended <- run.Get(ctx, nil) }()
	var last workflows.ReshardProgress
	for {
		if p, err := reshardProgress(ctx, c, run.GetID(), ""); err == nil {
			last = p.ReshardProgress
			line.show(p.line())
			switch p.Phase {
			case workflows.PhaseReadyForCutover, workflows.PhaseCancelled:
				return last, nil
			}
		}
		// Until a worker has taken the workflow, queries fail; its end
		// says what happened anyway.
		select {
		case err := <-ended:
			line.done()
			if err != nil {
				return last, workflowError(run.GetID(), err)
			}
			if p, qerr := reshardProgress(ctx, c, run.GetID(), ""); qerr == nil {
				last = p.ReshardProgress
			}
			return last, nil
		case <-ctx.Done():
			return last, ctx.Err()
		case <-time.After(progressPoll):
		}
	}
}

func printReshardOutcome(cmd *cobra.Command, id string, p workflows.ReshardProgress) {
	out := cmd.OutOrStdout()
	switch p.Phase {
	case workflows.PhaseReadyForCutover:
		fmt.Fprintf(out, "%s is ready for the cutover, its streams running; last VDiff: %s\n", id, diffLine(p.LastDiff))
		fmt.Fprintf(out, "next: tessera reshard --switch-traffic [--reads] or --cancel, with the same --database and --shard-group\n")
	default:
		fmt.Fprintf(out, "%s: %s\n", id, p.Phase)
	}
}
