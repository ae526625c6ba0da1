package cli

import (
	"fmt"
	"os"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
)

// Every flag of every command can also come from the environment, as
// TESSERA_<FLAG> (dashes as underscores, upper case), so that a process
// is configured the same way in a unit file, a container or a shell.
// Flags that read a variable of their own name it in their help (the
// instance's --dir reads TESSERA_INSTANCE_DIR, for one) and are left to
// it; for the others envFlags adds the variable to the help, and
// applyEnv sets the flag from it when the command line did not, through
// the flag's own parser, so that a bad value is refused at start with
// the variable's name.

// envName is the variable a flag without one of its own reads.
func envName(flag string) string {
	return "TESSERA_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
}

// ownsEnv reports whether a flag reads a variable of its own.
func ownsEnv(f *pflag.Flag) bool {
	return f.Name == "help" || strings.Contains(f.Usage, "TESSERA_")
}

// envAnnotation marks a flag that reads its variable through applyEnv.
const envAnnotation = "tessera_env"

// envFlags names the variable in the help of every flag that has none,
// in cmd and its subcommands, and marks the flag for applyEnv.
func envFlags(cmd *cobra.Command) {
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		if ownsEnv(f) {
			return
		}
		name := envName(f.Name)
		f.Usage += " (env " + name + ")"
		if f.Annotations == nil {
			f.Annotations = map[string][]string{}
		}
		f.Annotations[envAnnotation] = []string{name}
	})
	for _, sub := range cmd.Commands() {
		envFlags(sub)
	}
}

// applyEnv sets each marked flag of cmd that the command line left unset
// from its variable, when that is set, through the flag's own parser.
func applyEnv(cmd *cobra.Command) error {
	var err error
	cmd.Flags().VisitAll(func(f *pflag.Flag) {
		names := f.Annotations[envAnnotation]
		if err != nil || f.Changed || len(names) != 1 {
			return
		}
		v, ok := os.LookupEnv(names[0])
		if !ok {
			return
		}
		if serr := cmd.Flags().Set(f.Name, v); serr != nil {
			err = fmt.Errorf("%s=%q (--%s): %v", names[0], v, f.Name, serr)
		}
	})
	return err
}
