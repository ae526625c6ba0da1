package cli

import (
	"fmt"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/workflows"
)

// newOnlineDDLEndCommand makes "complete" and "revert": the updates that
// end a shadow-path migration started with --hold-for-revert once every
// shard has swapped.
func newOnlineDDLEndCommand(use, update, short, done string) *cobra.Command {
	var tf temporalFlags
	cmd := &cobra.Command{
		Use:   use + " ID",
		Short: short,
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ctx := cmd.Context()
			c, err := tf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			h, err := c.UpdateWorkflow(ctx, client.UpdateWorkflowOptions{
				WorkflowID: args[0], UpdateName: update,
				WaitForStage: client.WorkflowUpdateStageCompleted,
			})
			if err == nil {
				err = h.Get(ctx, nil)
			}
			if err != nil {
				return workflowError(args[0], notFound(args[0], err))
			}
			fmt.Fprintf(cmd.OutOrStdout(), "%s: %s (follow it with tessera onlineddl show %s)\n", args[0], done, args[0])
			return nil
		},
	}
	tf.register(cmd, nil)
	return cmd
}

func newOnlineDDLCompleteCommand() *cobra.Command {
	return newOnlineDDLEndCommand("complete", workflows.OnlineDDLCompleteUpdate,
		"End a swapped shadow-path migration: drop the old tables and the reverse streams (no Revert afterwards)",
		"completing: the old tables are being dropped")
}

func newOnlineDDLRevertCommand() *cobra.Command {
	return newOnlineDDLEndCommand("revert", workflows.OnlineDDLRevertUpdate,
		"Swap the old tables back on every shard, with every write made since the swap",
		"reverting: the old tables are being swapped back")
}
