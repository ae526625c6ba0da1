package cli

import (
	"encoding/json"
	"time"

	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/dev"
)

func newShardCommand() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "shard",
		Short: "Manage the shards of a dev cluster",
	}
	var flags clusterFlags
	flags.register(cmd)
	var replicas int
	var timeout time.Duration
	create := &cobra.Command{
		Use:   "create NAME [--replicas R] [--data DIR]",
		Short: "Add a shard (a primary and R replicas) to a running `tessera dev` cluster",
		Long: `Add a shard to a running dev cluster: the dev process creates a primary and
R streaming replicas with a sidecar each and registers them. Prints the new
shard's instances as JSON. Reshard moves rows to shards created this way.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := flags.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer s.Close()
			info, err := dev.RequestShard(cmd.Context(), s, args[0], replicas, timeout)
			if err != nil {
				return err
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(info)
		},
	}
	create.Flags().IntVar(&replicas, "replicas", 1, "streaming replicas")
	create.Flags().DurationVar(&timeout, "timeout", 3*time.Minute, "how long to wait for the shard")
	cmd.AddCommand(create)
	return cmd
}
