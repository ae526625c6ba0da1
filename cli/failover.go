package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/workflows"
)

func newFailoverCommand() *cobra.Command {
	var f opFlags
	var in workflows.FailoverInput
	cmd := &cobra.Command{
		Use:   "failover --shard SHARD [--force] [--reason TEXT]",
		Short: "Replace a shard's primary that is down (the Failover workflow)",
		Long: `Start the Failover workflow of a shard and follow its steps: it fences the old
primary if it can still be reached, promotes the replica with the most WAL,
publishes it as the shard's primary with the next term and repoints the other
replicas. A healthy primary is left alone unless --force is given.

Admins start failovers by themselves when a primary stays down; this command
is for operators. Only one failover of a shard runs at a time: if one runs,
this command follows it.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			in.Shard = f.shard
			return runOp(cmd, &f, workflows.FailoverID(f.shard), workflows.FailoverName, in, func(w io.Writer, r workflows.FailoverResult) {
				if r.NewPrimary == r.OldPrimary {
					fmt.Fprintf(w, "shard %s: primary %s kept (term %d)\n", f.shard, r.OldPrimary, r.Term)
				} else {
					fmt.Fprintf(w, "shard %s: primary %s -> %s (term %d)\n", f.shard, r.OldPrimary, r.NewPrimary, r.Term)
				}
				printSteps(w, r.Steps)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().BoolVar(&in.Force, "force", false, "fail over even when the primary is healthy")
	cmd.Flags().StringVar(&in.Reason, "reason", "requested by an operator", "why, recorded in the workflow's steps")
	return cmd
}
