// Command tessera is Tessera's single binary: every component and every
// operator tool is a subcommand. Run `tessera --help` for the list.
package main

import (
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/pgerr"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
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

// run executes the command line and returns the exit code; tests call it
// in-process.
func run(args []string, stdout, stderr io.Writer) int {
	root := newRootCommand()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	err := root.Execute()
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

func newRootCommand() *cobra.Command {
	root := &cobra.Command{
		Use:   "tessera",
		Short: "Tessera makes many real PostgreSQL servers look like one database",
		Long: `Tessera makes many real PostgreSQL servers look like one database.

One binary holds every component and operator tool as a subcommand.`,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.AddCommand(newTopoCommand())
	return root
}
