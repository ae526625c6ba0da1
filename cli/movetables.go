package cli

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/workflows"
)

// moveTablesFlags are `tessera movetables`' own flags.
type moveTablesFlags struct {
	temporal       temporalFlags
	database       string
	tables         []string
	targetGroup    string
	shardIndex     string
	sourceSecret   string
	inputFile      string
	maxLag         int64
	batchRows      int
	queue          string
	switchTraffic  bool
	reverseTraffic bool
	complete       bool
	reads          bool
	cancel         bool
	wait           bool
	asJSON         bool
}

func newMoveTablesCommand() *cobra.Command {
	var f moveTablesFlags
	cmd := &cobra.Command{
		Use:   "movetables --database DB --table SCHEMA.NAME... --target-shard-group GROUP | --input FILE",
		Short: "Move tables to another shard group (the MoveTables workflow), showing its progress",
		Long: `Start the MoveTables workflow and show its progress until it is ready for the
cutover: the phase, the rows copied, the streams' lag and the last VDiff's
result. The tables must all be in one shard group, and must already exist,
empty, on every shard of the target group (docs/operations.md, MoveTables):
  tessera movetables --database shop --table public.orders --target-shard-group archive
--input reads a whole MoveTablesInput as JSON instead. With --source-secret the
tables are imported from a Postgres outside the cluster instead, whose
connection string (password included) is in that file on the workers: the
string itself never goes on a command line or into the workflow's input.

If the move into the group already runs, this command follows it. With
--switch-traffic, --reverse-traffic, --complete or --cancel (and the same
--database and --target-shard-group) it acts on the running move instead:
--switch-traffic moves the tables' reads and writes to the target group (an
import fences the external tables: the application then goes through a
router), --reverse-traffic moves them back (not for an import), --complete ends a switched move and drops
the tables from the source group's shards, --cancel stops a move that has not
switched and drops what it created on every instance. --switch-traffic --reads
moves only replica reads (sessions with SET tessera.target = 'replica') of the
tables to the target group, ahead of the writes (not for an import);
--reverse-traffic --reads puts them back.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			in, err := f.input()
			if err != nil {
				return err
			}
			id := workflows.MoveTablesID(in.Database, in.TargetShardGroup)
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
				return sendUpdate(cmd, c, id, workflows.SwitchTrafficUpdate, "replica reads switched to "+in.TargetShardGroup+"; writes stay on the source group", traffic)
			case f.switchTraffic:
				return sendUpdate(cmd, c, id, workflows.SwitchTrafficUpdate, "traffic switched to "+in.TargetShardGroup, traffic)
			case f.reverseTraffic && f.reads:
				return sendUpdate(cmd, c, id, workflows.ReverseTrafficUpdate, "replica reads back on the source group", traffic)
			case f.reverseTraffic:
				return sendUpdate(cmd, c, id, workflows.ReverseTrafficUpdate, "traffic moved back to the source group", traffic)
			case f.complete:
				return sendUpdate(cmd, c, id, workflows.CompleteUpdate, "completed: the tables are dropped from the source group")
			case f.cancel:
				return cancelReshard(cmd, c, id, f.wait)
			}
			run, err := startOp(ctx, cmd.ErrOrStderr(), c, id, f.queue, workflows.MoveTablesName, in)
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
			out := cmd.OutOrStdout()
			if prog.Phase != workflows.PhaseReadyForCutover {
				fmt.Fprintf(out, "%s: %s\n", id, prog.Phase)
				return nil
			}
			fmt.Fprintf(out, "%s is ready for the cutover, its streams running; last VDiff: %s\n", id, diffLine(prog.LastDiff))
			fmt.Fprintf(out, "next: tessera movetables --switch-traffic or --cancel, with the same --database and --target-shard-group\n")
			return nil
		},
	}
	f.temporal.register(cmd, nil)
	fl := cmd.Flags()
	fl.StringVar(&f.database, "database", "", "the database whose tables move")
	fl.StringArrayVar(&f.tables, "table", nil, "a table that moves, SCHEMA.NAME (repeat for each table)")
	fl.StringVar(&f.targetGroup, "target-shard-group", "", "the shard group the tables move to")
	fl.StringVar(&f.shardIndex, "shard-index", "", "the shard index that routes the tables in the target group (default: the group's)")
	fl.StringVar(&f.sourceSecret, "source-secret", "", "import from a Postgres outside the cluster: the absolute path, on the workers, of a file holding its connection string")
	fl.StringVar(&f.inputFile, "input", "", "a JSON file holding the MoveTablesInput, instead of --database, --table and --target-shard-group")
	fl.IntVar(&f.batchRows, "copy-batch-rows", 0, "rows per copy batch, 1 to 1000000 (default: the worker's, 10000)")
	fl.Int64Var(&f.maxLag, "max-lag-bytes", 0, "the catch-up ends when every stream is within this many WAL bytes of its source (default 1 MiB)")
	fl.StringVar(&f.queue, "task-queue", workflows.TaskQueue, "the task queue of the workers that run it")
	fl.BoolVar(&f.switchTraffic, "switch-traffic", false, "ask the running move for its cutover to the target group")
	fl.BoolVar(&f.reverseTraffic, "reverse-traffic", false, "move a switched move's traffic back to the source group")
	fl.BoolVar(&f.reads, "reads", false, "with --switch-traffic or --reverse-traffic: move only replica reads (tessera.target = replica)")
	fl.BoolVar(&f.complete, "complete", false, "end a switched move: drop the tables from the source group and what the move made")
	fl.BoolVar(&f.cancel, "cancel", false, "cancel the running move: its streams stop and what it created is dropped")
	fl.BoolVar(&f.wait, "wait", true, "show the progress until the move is ready for the cutover or ends; --wait=false only starts it")
	fl.BoolVar(&f.asJSON, "json", false, "print the last progress as JSON")
	cmd.MarkFlagsMutuallyExclusive("switch-traffic", "reverse-traffic", "complete", "cancel")
	cmd.MarkFlagsMutuallyExclusive("input", "table")
	return cmd
}

// acting says whether the command acts on a running move.
func (f *moveTablesFlags) acting() bool {
	return f.switchTraffic || f.reverseTraffic || f.complete || f.cancel
}

// input is the MoveTablesInput the flags or the file give.
func (f *moveTablesFlags) input() (workflows.MoveTablesInput, error) {
	var in workflows.MoveTablesInput
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
	if f.targetGroup != "" {
		in.TargetShardGroup = f.targetGroup
	}
	if f.shardIndex != "" {
		in.ShardIndex = f.shardIndex
	}
	if f.batchRows != 0 {
		in.CopyBatchRows = f.batchRows
	}
	if f.maxLag != 0 {
		in.MaxLagBytes = f.maxLag
	}
	if f.sourceSecret != "" {
		in.Source = &workflows.ExternalSource{ConnSecret: f.sourceSecret}
	}
	in.Tables = append(in.Tables, f.tables...)
	if in.Database == "" || in.TargetShardGroup == "" {
		return in, pgerr.New(pgerr.InvalidParameterValue, "--database and --target-shard-group (or an --input file naming them) are required")
	}
	if f.reads && !f.switchTraffic && !f.reverseTraffic {
		return in, pgerr.New(pgerr.InvalidParameterValue, "--reads goes with --switch-traffic or --reverse-traffic")
	}
	if len(in.Tables) == 0 && !f.acting() {
		return in, pgerr.New(pgerr.InvalidParameterValue, "at least one --table (or an --input file with tables) is required")
	}
	return in, nil
}

// sendUpdate sends one of a data movement's updates, with its arguments,
// and waits for its answer.
func sendUpdate(cmd *cobra.Command, c client.Client, id, update, done string, args ...any) error {
	ctx := cmd.Context()
	h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
		WorkflowID: id, UpdateName: update, WaitForStage: client.WorkflowUpdateStageCompleted, Args: args,
	})
	if err == nil {
		err = h.Get(ctx, nil)
	}
	if err != nil {
		return workflowError(id, notFound(id, err))
	}
	fmt.Fprintf(cmd.OutOrStdout(), "%s: %s\n", id, done)
	return nil
}
