package cli

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/spf13/cobra"
)

// TestFlagsFromEnvironment: a flag without a variable of its own is set
// from TESSERA_<FLAG> unless the command line sets it; a flag that names
// its own variable is left to it; the help names the variable.
func TestFlagsFromEnvironment(t *testing.T) {
	var listen, dir string
	var grace time.Duration
	run := func(args ...string) error {
		cmd := &cobra.Command{Use: "serve", RunE: func(*cobra.Command, []string) error { return nil }}
		cmd.Flags().StringVar(&listen, "listen", "127.0.0.1:6432", "address clients connect to")
		cmd.Flags().DurationVar(&grace, "drain-grace", 30*time.Second, "grace period")
		cmd.Flags().StringVar(&dir, "dir", "", "instance directory (env TESSERA_INSTANCE_DIR)")
		root := &cobra.Command{Use: "tessera", SilenceErrors: true, SilenceUsage: true}
		root.AddCommand(cmd)
		envFlags(root)
		root.PersistentPreRunE = func(cmd *cobra.Command, _ []string) error { return applyEnv(cmd) }
		if u := cmd.Flags().Lookup("listen").Usage; !strings.Contains(u, "(env TESSERA_LISTEN)") {
			t.Errorf("--listen's help %q names no variable", u)
		}
		if u := cmd.Flags().Lookup("dir").Usage; strings.Contains(u, "TESSERA_DIR") {
			t.Errorf("--dir's help %q names a second variable", u)
		}
		root.SetArgs(append([]string{"serve"}, args...))
		return root.Execute()
	}
	t.Setenv("TESSERA_LISTEN", "10.0.0.7:6432")
	t.Setenv("TESSERA_DRAIN_GRACE", "3s")
	t.Setenv("TESSERA_DIR", "/not/this")
	if err := run(); err != nil || listen != "10.0.0.7:6432" || grace != 3*time.Second || dir != "" {
		t.Fatalf("from the environment: %v, listen %q, grace %v, dir %q", err, listen, grace, dir)
	}
	if err := run("--listen", "10.0.0.8:1"); err != nil || listen != "10.0.0.8:1" || grace != 3*time.Second {
		t.Fatalf("the command line first: %v, listen %q, grace %v", err, listen, grace)
	}
	t.Setenv("TESSERA_DRAIN_GRACE", "soon")
	if err := run(); err == nil || !strings.Contains(err.Error(), "TESSERA_DRAIN_GRACE") {
		t.Fatalf("a bad value: %v, want an error naming TESSERA_DRAIN_GRACE", err)
	}
}

// TestRouterRefusesBadEnvironment: through the real command line, a bad
// value in a router flag's variable stops it at start, naming it.
func TestRouterRefusesBadEnvironment(t *testing.T) {
	t.Setenv("TESSERA_MAX_CONNECTIONS", "many")
	var out, errOut syncBuffer
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := RunContext(ctx, []string{"router", "--etcd", "http://127.0.0.1:1"}, &out, &errOut, Options{})
	if code == 0 || !strings.Contains(errOut.String(), "TESSERA_MAX_CONNECTIONS") {
		t.Fatalf("exit %d: %s", code, errOut.String())
	}
}
