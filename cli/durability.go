package cli

import (
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// durabilityID is the workflow id of a shard's durability change: one at
// a time per shard.
func durabilityID(shard string) string { return "durability-" + shard }

func newDurabilityCommand() *cobra.Command {
	var f opFlags
	var policy string
	cmd := &cobra.Command{
		Use:   "durability --shard SHARD --policy async|sync|cross_zone_sync",
		Short: "Set a shard's durability policy (the SetDurability workflow)",
		Long: `Set when a shard's primary acknowledges a commit, and apply it at once:

  async            the primary alone
  sync             after one replica has the commit (the default)
  cross_zone_sync  after one replica in another zone than the primary's has it

The policy is recorded in the shard's state and enforced by Postgres's
synchronous replication (synchronous_standby_names); admins keep it enforced
as replicas come and go and failovers move the primary.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			d := store.Durability(policy)
			if policy == "" {
				return pgerr.New(pgerr.InvalidParameterValue, "--policy is required: async, sync or cross_zone_sync")
			}
			if err := d.Check(); err != nil {
				return err
			}
			in := workflows.DurabilityInput{Shard: f.shard, Policy: d}
			return runOp(cmd, &f, durabilityID(f.shard), workflows.SetDurabilityName, in, func(w io.Writer, r workflows.DurabilityResult) {
				names := r.SynchronousStandbyNames
				if names == "" {
					names = "'' (commits do not wait for a replica)"
				}
				fmt.Fprintf(w, "shard %s: durability %s; synchronous_standby_names = %s\n", f.shard, d, names)
			})
		},
	}
	f.register(cmd)
	cmd.Flags().StringVar(&policy, "policy", "", "async, sync or cross_zone_sync (required)")
	return cmd
}
