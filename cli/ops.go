package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/workflows"
)

// opFlags are the flags every operation command shares. The cluster's
// etcd (clusterFlags) is where the shard is looked up before anything
// starts.
type opFlags struct {
	temporal temporalFlags
	cluster  clusterFlags
	shard    string
	wait     bool
	asJSON   bool
}

func (f *opFlags) register(cmd *cobra.Command) {
	f.cluster.register(cmd)
	f.temporal.register(cmd, &f.cluster.dataDir)
	fl := cmd.Flags()
	fl.StringVar(&f.shard, "shard", "", "the shard (required)")
	fl.BoolVar(&f.wait, "wait", true, "follow the workflow's steps until it ends and print its result; --wait=false only starts it")
	fl.BoolVar(&f.asJSON, "json", false, "print the result as JSON")
}

func (f *opFlags) check() error {
	if f.shard == "" {
		return pgerr.New(pgerr.InvalidParameterValue, "--shard is required")
	}
	return nil
}

// requireShard refuses a shard the cluster does not have, before a
// workflow or a schedule is created for it: a typo must change nothing.
// (The workflows' activities refuse it too, for starts that bypass this
// command.)
func (f *opFlags) requireShard(ctx context.Context) error {
	s, err := f.cluster.dial(ctx)
	if err != nil {
		return pgerr.New("08001", "cannot reach the topology service to look shard %s up: %v", f.shard, err)
	}
	defer s.Close()
	known, err := s.ShardKnown(ctx, f.shard)
	if err != nil {
		return pgerr.New("08001", "cannot look shard %s up in the topology service: %v", f.shard, err)
	}
	if !known {
		return pgerr.New(pgerr.UndefinedObject, "shard %q does not exist: no instance of it is registered, no state is stored for it and the topology does not name it", f.shard)
	}
	return nil
}

// runOp starts (or joins) an operation's workflow and, with --wait,
// follows it and prints its result: as JSON with --json, else by human.
// Progress goes to stderr so that stdout holds only the result.
func runOp[R any](cmd *cobra.Command, f *opFlags, id, workflow string, input any, human func(io.Writer, R)) error {
	ctx := cmd.Context()
	if err := f.requireShard(ctx); err != nil {
		return err
	}
	c, err := f.temporal.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	run, err := startOp(ctx, cmd.ErrOrStderr(), c, id, workflows.TaskQueue, workflow, input)
	if err != nil || !f.wait {
		return err
	}
	var result R
	if err := follow(ctx, cmd.ErrOrStderr(), c, run, &result); err != nil {
		return err
	}
	return printResult(cmd.OutOrStdout(), f.asJSON, result, human)
}

func printResult[R any](w io.Writer, asJSON bool, result R, human func(io.Writer, R)) error {
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(result)
	}
	human(w, result)
	return nil
}

func printSteps(w io.Writer, steps []string) {
	for _, s := range steps {
		fmt.Fprintf(w, "  - %s\n", s)
	}
}
