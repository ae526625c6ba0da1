package cli

import (
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
	"github.com/tesseradb/tessera/topo/store"
)

func newTopoCommand() *cobra.Command {
	var etcd clusterFlags
	cmd := &cobra.Command{
		Use:   "topo",
		Short: "Validate, inspect, route by and apply data topologies",
		Long: `Work with data topologies: the JSON documents that map tables to shard groups
and routing keys to shards (see docs/topology.md).

validate, route --file and diff work on files; apply and get talk to the
topology service in etcd.`,
	}
	etcd.register(cmd)
	cmd.AddCommand(newTopoValidateCommand(), newTopoRouteCommand(&etcd), newTopoDiffCommand(),
		newTopoApplyCommand(&etcd), newTopoGetCommand(&etcd))
	return cmd
}

func readTopology(path string) (*topo.Topology, error) {
	doc, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return topo.Parse(doc)
}

func newTopoValidateCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "validate FILE",
		Short: "Check a topology file: print ok, or every problem found and exit 1",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			doc, err := os.ReadFile(args[0])
			if err != nil {
				return err
			}
			if _, err := topo.Parse(doc); err != nil {
				var verr *topo.ValidationError
				if !errors.As(err, &verr) {
					return err
				}
				for _, p := range verr.Problems {
					fmt.Fprintln(cmd.OutOrStdout(), p)
				}
				return &exitError{code: 1, silent: true}
			}
			fmt.Fprintln(cmd.OutOrStdout(), "ok")
			return nil
		},
	}
}

// routeResult is the one JSON line `topo route` prints.
type routeResult struct {
	RoutingKey string `json:"routing_key"`
	Shard      string `json:"shard"`
	ShardGroup string `json:"shard_group"`
	Index      string `json:"index"`
}

func newTopoRouteCommand(etcd *clusterFlags) *cobra.Command {
	var file, table, index, typ string
	var binary bool
	cmd := &cobra.Command{
		Use:   "route --table DB.SCHEMA.TABLE --type TYPE [--file FILE] [--index NAME] VALUE",
		Short: "Print the routing key and shard of a shard-key value, as one JSON line",
		Long: `Print the routing key and shard of a shard-key value as the router computes it.

VALUE is in Postgres text format for TYPE (bigint, text, uuid, timestamptz, ...),
or hexadecimal binary format with --binary. The topology comes from --file, or
from the topology service when --file is not given. --index routes by another
shard index (an alternate) over the table's shard group.`,
		Example: `  tessera topo route --file testdata/topologies/store_xxhash.json --table store.public.customers --type bigint 42
  tessera topo route --table store.public.customers --type bigint -- -5   # "--" before a negative value`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			parts := strings.Split(table, ".")
			if len(parts) != 3 || parts[0] == "" || parts[1] == "" || parts[2] == "" {
				return fmt.Errorf("--table must be DB.SCHEMA.TABLE, not %q", table)
			}
			colType, err := shardfunc.ParseColumnType(typ)
			if err != nil {
				return err
			}
			var top *topo.Topology
			if file != "" {
				top, err = readTopology(file)
			} else {
				top, err = fetchTopology(cmd, etcd)
			}
			if err != nil {
				return err
			}
			p := top.Resolve(parts[0], parts[1], parts[2])
			if p.IsReference() {
				return pgerr.New(pgerr.FeatureNotSupported, "%s is a reference table: every shard of its groups holds all of it", table)
			}
			ix := p.Index
			if index != "" {
				if ix = top.ShardIndexes[index]; ix == nil {
					return fmt.Errorf("no shard index named %q", index)
				}
			}
			raw, format := []byte(args[0]), shardfunc.TextFormat
			if binary {
				if raw, err = decodeHex(args[0]); err != nil {
					return err
				}
				format = shardfunc.BinaryFormat
			}
			key, shard, err := p.RouteBy(ix, colType, format, raw)
			if err != nil {
				return err
			}
			res := routeResult{RoutingKey: fmt.Sprintf("%016x", key), Shard: shard, ShardGroup: p.Group.UID}
			if ix != nil {
				res.Index = ix.Name
			}
			return json.NewEncoder(cmd.OutOrStdout()).Encode(res)
		},
	}
	cmd.Flags().StringVar(&file, "file", "", "topology file (default: the topology service)")
	cmd.Flags().StringVar(&table, "table", "", "table as DB.SCHEMA.TABLE")
	cmd.Flags().StringVar(&index, "index", "", "route by this shard index instead of the table's")
	cmd.Flags().StringVar(&typ, "type", "", "Postgres type of the shard-key column (bigint, text, uuid, ...)")
	cmd.Flags().BoolVar(&binary, "binary", false, "VALUE is Postgres binary format, in hexadecimal")
	_ = cmd.MarkFlagRequired("table")
	_ = cmd.MarkFlagRequired("type")
	return cmd
}

func decodeHex(s string) ([]byte, error) {
	out, err := hex.DecodeString(strings.TrimPrefix(strings.TrimPrefix(s, "\\x"), "0x"))
	if err != nil {
		return nil, fmt.Errorf("--binary value %q is not hexadecimal: %w", s, err)
	}
	return out, nil
}

func newTopoDiffCommand() *cobra.Command {
	return &cobra.Command{
		Use:   "diff OLD NEW",
		Short: "List every table whose placement differs between two topology files (exit 1 if any)",
		Long: `List every table whose shard group, shard index or key ranges differ between
two topology files. Applying such a change to a live cluster moves where rows
are looked for without moving the rows, so the topology service refuses it
unless forced. Exits 0 when placements are equal, 1 when they differ, 2 on error.`,
		Args: cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			old, err := readTopology(args[0])
			if err != nil {
				return &exitError{code: 2, err: fmt.Errorf("%s: %w", args[0], err)}
			}
			new, err := readTopology(args[1])
			if err != nil {
				return &exitError{code: 2, err: fmt.Errorf("%s: %w", args[1], err)}
			}
			changes := topo.Diff(old, new)
			if len(changes) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "no placement changes")
				return nil
			}
			for _, c := range changes {
				fmt.Fprintln(cmd.OutOrStdout(), c)
			}
			return &exitError{code: 1, silent: true}
		},
	}
}

func newTopoApplyCommand(etcd *clusterFlags) *cobra.Command {
	var expected int64
	var force bool
	cmd := &cobra.Command{
		Use:   "apply FILE [--expected-revision N] [--force]",
		Short: "Store a topology file in the topology service",
		Long: `Validate FILE and store it as the cluster's topology; every router, sidecar and
worker picks it up without a restart. Prints the new revision.

--expected-revision makes the write a compare-and-swap (0: none stored yet).
A change that moves any table's placement is refused unless --force: only
data-movement workflows, which move the rows too, should force it.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			top, err := readTopology(args[0])
			if err != nil {
				return err
			}
			s, err := etcd.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer s.Close()
			rev, err := s.ApplyTopology(cmd.Context(), top, store.ApplyOptions{ExpectedRevision: expected, Force: force})
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "revision %d\n", rev)
			return nil
		},
	}
	cmd.Flags().Int64Var(&expected, "expected-revision", store.AnyRevision, "apply only if the stored revision is N (0: none stored yet)")
	cmd.Flags().BoolVar(&force, "force", false, "apply even if tables' placements change")
	return cmd
}

func newTopoGetCommand(etcd *clusterFlags) *cobra.Command {
	return &cobra.Command{
		Use:   "get",
		Short: "Print the stored topology (its revision goes to stderr)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			s, err := etcd.dial(cmd.Context())
			if err != nil {
				return err
			}
			defer s.Close()
			snap, err := s.GetTopology(cmd.Context())
			if err != nil {
				return err
			}
			doc, err := snap.Topology.MarshalJSON()
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.ErrOrStderr(), "revision %d\n", snap.Revision)
			fmt.Fprintln(cmd.OutOrStdout(), string(doc))
			return nil
		},
	}
}

func fetchTopology(cmd *cobra.Command, etcd *clusterFlags) (*topo.Topology, error) {
	s, err := etcd.dial(cmd.Context())
	if err != nil {
		return nil, err
	}
	defer s.Close()
	snap, err := s.GetTopology(cmd.Context())
	if err != nil {
		return nil, err
	}
	return snap.Topology, nil
}
