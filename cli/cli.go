// Package cli is the tessera command line: every component and operator
// tool as a subcommand. Package main (cmd/tessera) only wires in the parts
// that must stay out of tests and production builds of other packages,
// such as the embedded Temporal server.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/dev"
	"github.com/tesseradb/tessera/pgerr"
)

// Main runs the command line with the process's arguments and exits.
func Main(opts Options) {
	os.Exit(Run(os.Args[1:], os.Stdout, os.Stderr, opts))
}

// exitError carries a process exit code other than 1 (or a silent 1, when
// the command already printed what went wrong).
type exitError struct {
	code   int
	silent bool
	err    error
}

func (e *exitError) Error() string {
	if e.err == nil {
		return fmt.Sprintf("exit status %d", e.code)
	}
	return e.err.Error()
}

// Run executes the command line and returns the exit code.
func Run(args []string, stdout, stderr io.Writer, opts Options) int {
	return RunContext(context.Background(), args, stdout, stderr, opts)
}

// RunContext is Run with a context whose end stops long-running commands
// as a signal would; tests call it in-process.
func RunContext(ctx context.Context, args []string, stdout, stderr io.Writer, opts Options) int {
	root := newRootCommand(opts)
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.ExecuteContext(ctx)
	if err == nil {
		return 0
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if !ee.silent {
			fmt.Fprintln(stderr, "tessera:", describe(ee.err))
		}
		return ee.code
	}
	fmt.Fprintln(stderr, "tessera:", describe(err))
	return 1
}

// describe adds the SQLSTATE to errors that carry one.
func describe(err error) string {
	if code := pgerr.Code(err); code != pgerr.InternalError {
		return fmt.Sprintf("%v (SQLSTATE %s)", err, code)
	}
	return err.Error()
}

// Options carries what package main plugs in.
type Options struct {
	// Temporal starts the embedded Temporal server for `tessera dev`.
	// Package main supplies it so that nothing else links the server.
	Temporal dev.TemporalStarter
}

func newRootCommand(opts Options) *cobra.Command {
	root := &cobra.Command{
		Use:   "tessera",
		Short: "Tessera makes many real PostgreSQL servers look like one database",
		Long: `Tessera makes many real PostgreSQL servers look like one database.

One binary holds every component and operator tool as a subcommand.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newTopoCommand(), newDevCommand(opts), newStatusCommand(), newShardCommand(), newRouterCommand(),
		newWorkerCommand(), newInstanceCommand(), newReplicatorCommand(), newFailoverCommand(), newSwitchoverCommand(), newDurabilityCommand(),
		newReshardCommand(), newMoveTablesCommand(), newVDiffCommand(), newWorkflowCommand(), newOnlineDDLCommand(), newSchemaCommand())
	envFlags(root)
	root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return applyEnv(cmd) }
	return root
}
