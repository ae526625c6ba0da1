package cli

import (
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/workflows"
)

func newSchemaCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schema",
		Short: "Look at the schema across shards",
	}
	cmd.AddCommand(newSchemaCheckCommand())
	return cmd
}

func newSchemaCheckCommand() *cobra.Command {
	var tf temporalFlags
	var in workflows.SchemaCheckInput
	var queue string
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "check --database DB [--shard S]... [--json]",
		Short: "Report every table whose definition differs between the shards that hold it",
		Long: `Compare every table of a database (columns with their types, nullability and
defaults, constraints, indexes) between the shards that hold it, each against
the first shard that holds it (the authoritative shard first), and report each
difference by table and shard. It runs as the SchemaCheck workflow, on a
worker, which reaches the shard primaries with the Replicator's credentials.
Exits with SQLSTATE 55000 when something differs.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if in.Database == "" {
				return pgerr.New(pgerr.InvalidParameterValue, "--database is required")
			}
			ctx := cmd.Context()
			c, err := tf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			id := fmt.Sprintf("schema-check-%s-%d", in.Database, time.Now().UnixNano())
			run, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
				ID: id, TaskQueue: queue, StaticSummary: in.Summary(),
			}, workflows.SchemaCheckName, in)
			if err != nil {
				return fmt.Errorf("starting workflow %s: %w", id, err)
			}
			var res workflows.SchemaCheckResult
			if err := run.Get(ctx, &res); err != nil {
				return workflowError(id, err)
			}
			if err := printResult(cmd.OutOrStdout(), asJSON, res, printSchemaCheck); err != nil {
				return err
			}
			if n := len(res.Differences); n > 0 {
				return pgerr.New(pgerr.ObjectNotInPrerequisiteState, "the schema of %s differs between shards: %d differences", in.Database, n)
			}
			return nil
		},
	}
	tf.register(cmd, nil)
	cmd.Flags().StringVar(&in.Database, "database", "", "the database")
	cmd.Flags().StringSliceVar(&in.Shards, "shard", nil, "the shards to compare (default: every shard of the topology)")
	cmd.Flags().StringVar(&queue, "task-queue", workflows.TaskQueue, "the task queue of the workers that run it")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the report as JSON")
	return cmd
}

func printSchemaCheck(w io.Writer, r workflows.SchemaCheckResult) {
	fmt.Fprintf(w, "schema check of %s: %d tables on %v, %d differences\n", r.Database, r.Tables, r.Shards, len(r.Differences))
	for _, d := range r.Differences {
		fmt.Fprintf(w, "  %s on %s: %s\n", d.Table, d.Shard, d.What)
	}
}
