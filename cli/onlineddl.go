package cli

import (
	"context"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/workflows"
	"github.com/tesseradb/tessera/workflows/launch"
)

// onlineDDLPoll is how often a followed migration's progress is read.
const onlineDDLPoll = 500 * time.Millisecond

func newOnlineDDLCommand() *cobra.Command {
	var tf temporalFlags
	var in workflows.OnlineDDLInput
	var lockTimeout time.Duration
	var queue string
	var noWait, asJSON bool
	cmd := &cobra.Command{
		Use:   `onlineddl --database DB [--shard S]... "ALTER TABLE ..."`,
		Short: "Run a schema change on every shard that holds the table (the OnlineDDL workflow), following each shard",
		Long: `Start the OnlineDDL workflow for one ALTER TABLE, CREATE INDEX CONCURRENTLY or
DROP INDEX statement and follow it shard by shard until every shard that holds
the table has the change.

The statement is classified first: a change Postgres makes without rewriting
the table (ADD COLUMN with a constant default, DROP COLUMN, renames, ADD
CONSTRAINT ... NOT VALID, VALIDATE CONSTRAINT, CREATE INDEX CONCURRENTLY...)
takes the direct path: it runs on the first shard, then on the others, each
attempt waiting at most --lock-timeout for its lock and retried with backoff
until it succeeds. A change that rewrites the table (ALTER COLUMN TYPE, ...)
takes the shadow-table path: on every shard at once a shadow table with the
new definition is created and filled from a consistent snapshot, the change
stream keeps it current, and it is swapped in by rename under a short lock
while routers hold the table's statements. With --hold-for-revert the old
tables are kept current after the swap until tessera onlineddl complete ID
(drops them) or tessera onlineddl revert ID (swaps them back); the command
then returns once the migration has started.

Migrations of the same table run one at a time (their workflow id is derived
from the database and the table): if one runs, this command waits for it to
end, then starts. See also: tessera onlineddl show ID, tessera onlineddl
cancel ID, tessera schema check.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			in.SQL = args[0]
			if in.Database == "" {
				return pgerr.New(pgerr.InvalidParameterValue, "--database is required")
			}
			in.LockTimeoutMillis = int(lockTimeout.Milliseconds())
			id, err := launch.OnlineDDLID(in.Database, in.SQL)
			if err != nil {
				return err
			}
			ctx := cmd.Context()
			tc, err := tf.dial(ctx)
			if err != nil {
				return err
			}
			defer tc.Close()
			run, err := launch.StartOnlineDDL(ctx, cmd.ErrOrStderr(), tc, id, queue, in, true)
			if err != nil || noWait || in.HoldForRevert {
				return err
			}
			res, err := followOnlineDDL(ctx, cmd.ErrOrStderr(), tc, run)
			if err != nil {
				return err
			}
			return printResult(cmd.OutOrStdout(), asJSON, res, printOnlineDDL)
		},
	}
	tf.register(cmd, nil)
	cmd.Flags().StringVar(&in.Database, "database", "", "the database")
	cmd.Flags().StringSliceVar(&in.Shards, "shard", nil, "limit the migration to these shards (default: every shard that holds the table)")
	cmd.Flags().DurationVar(&lockTimeout, "lock-timeout", time.Second, "how long each attempt waits for its lock on a shard")
	cmd.Flags().StringVar(&queue, "task-queue", workflows.TaskQueue, "the task queue of the workers that run it")
	cmd.Flags().BoolVar(&noWait, "no-wait", false, "start it and return (follow it with tessera onlineddl show ID)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the result as JSON")
	cmd.Flags().BoolVar(&in.HoldForRevert, "hold-for-revert", false, "shadow path: keep the old tables current after the swap until complete or revert (implies --no-wait)")
	cmd.AddCommand(newOnlineDDLShowCommand(), newOnlineDDLCancelCommand(), newOnlineDDLCompleteCommand(), newOnlineDDLRevertCommand())
	return cmd
}

// followOnlineDDL prints each shard's state whenever it changes, until the
// migration ends, and returns its result.
func followOnlineDDL(ctx context.Context, w io.Writer, c client.Client, run client.WorkflowRun) (workflows.OnlineDDLResult, error) {
	var res workflows.OnlineDDLResult
	done := make(chan error, 1)
	go func() { done <- run.Get(ctx, &res) }()
	t := time.NewTicker(onlineDDLPoll)
	defer t.Stop()
	last := ""
	for {
		select {
		case err := <-done:
			return res, workflowError(run.GetID(), err)
		case <-t.C:
		}
		p, err := onlineDDLProgress(ctx, c, run.GetID(), run.GetRunID())
		if err != nil {
			continue
		}
		if line := progressLine(p); line != last {
			fmt.Fprintln(w, line)
			last = line
		}
	}
}

func onlineDDLProgress(ctx context.Context, c client.Client, id, runID string) (workflows.OnlineDDLProgress, error) {
	var p workflows.OnlineDDLProgress
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := c.QueryWorkflow(qctx, id, runID, workflows.OnlineDDLProgressQuery)
	if err == nil {
		err = v.Get(&p)
	}
	return p, err
}

// progressLine is a migration's phase and every shard's state on one line.
func progressLine(p workflows.OnlineDDLProgress) string {
	parts := make([]string, len(p.Shards))
	for i, s := range p.Shards {
		parts[i] = fmt.Sprintf("%s %s", s.Shard, s.State)
		if s.Shadow != "" {
			parts[i] += " " + s.Shadow
		}
		if s.Attempts > 1 || s.LastError != "" {
			parts[i] += fmt.Sprintf(" (attempt %d", s.Attempts)
			if s.LastError != "" {
				parts[i] += ": " + s.LastError
			}
			parts[i] += ")"
		}
	}
	return fmt.Sprintf("%s: %s", p.Phase, strings.Join(parts, ", "))
}

func printOnlineDDL(w io.Writer, r workflows.OnlineDDLResult) {
	printOnlineDDLProgress(w, r.OnlineDDLProgress)
}

func printOnlineDDLProgress(w io.Writer, p workflows.OnlineDDLProgress) {
	fmt.Fprintf(w, "phase: %s\n", p.Phase)
	if p.Plan != nil {
		fmt.Fprintf(w, "path:  %s (%s)\n", p.Plan.Path, p.Plan.Reason)
	}
	if len(p.Shards) > 0 {
		tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "SHARD\tSTATE\tATTEMPTS\tMS\tLAST ERROR")
		for _, s := range p.Shards {
			ms := fmt.Sprintf("%.1f", s.Millis)
			if s.AlreadyApplied {
				ms = "already applied"
			}
			state := s.State
			if s.Shadow != "" {
				// The shadow path's Millis is the swap's lock time.
				state += " (" + s.Shadow + ")"
			}
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", s.Shard, state, s.Attempts, ms, s.LastError)
		}
		tw.Flush()
	}
	if p.SchemaCheck != nil {
		printSchemaCheck(w, *p.SchemaCheck)
	}
	if p.Error != "" {
		fmt.Fprintf(w, "error: %s\n", p.Error)
	}
}

func newOnlineDDLShowCommand() *cobra.Command {
	var tf temporalFlags
	var runID string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "show ID [--run RUN_ID] [--json]",
		Short: "Show a migration: its path, each shard's state, its schema check",
		Long: `Show one OnlineDDL run (the latest of the id unless --run is given): while it
runs, its progress query (each shard's state, attempts and last error); once
it has ended, its result. A running migration is followed until it ends.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := tf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			id := args[0]
			d, err := c.DescribeWorkflow(ctx, id, runID)
			if err != nil {
				return workflowError(id, notFound(id, err))
			}
			run := c.GetWorkflow(ctx, id, d.WorkflowExecution.RunID)
			res, err := followOnlineDDL(ctx, cmd.ErrOrStderr(), c, run)
			if perr := printResult(cmd.OutOrStdout(), asJSON, res, printOnlineDDL); perr != nil {
				return perr
			}
			return err
		},
	}
	tf.register(cmd, nil)
	cmd.Flags().StringVar(&runID, "run", "", "the run id (default: the latest run)")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	return cmd
}

func newOnlineDDLCancelCommand() *cobra.Command {
	var tf temporalFlags
	cmd := &cobra.Command{
		Use:   "cancel ID",
		Short: "Cancel a migration before any shard ran it (refused afterwards: the cluster converges)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := tf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
				WorkflowID: args[0], UpdateName: workflows.OnlineDDLCancelUpdate,
				WaitForStage: client.WorkflowUpdateStageCompleted,
			})
			if err == nil {
				err = h.Get(ctx, nil)
			}
			if err != nil {
				return workflowError(args[0], notFound(args[0], err))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s cancelled: no shard had run it\n", args[0])
			return nil
		},
	}
	tf.register(cmd, nil)
	return cmd
}
