package cli

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/spf13/pflag"
)

// clearInstanceEnv unsets every TESSERA_* variable, so that the machine's
// environment cannot fill in a flag these tests leave out.
func clearInstanceEnv(t *testing.T) {
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		if strings.HasPrefix(name, "TESSERA_") && name != "TESSERA_TEST_PORT_OFFSET" {
			t.Setenv(name, "")
			os.Unsetenv(name)
		}
	}
}

// writeSecret writes a secret file, as an operator would.
func writeSecret(t *testing.T, dir, name, value string) string {
	t.Helper()
	path := filepath.Join(dir, name)
	if err := os.WriteFile(path, []byte(value+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// parseInstanceFlags parses args as `tessera instance` does and checks them.
func parseInstanceFlags(t *testing.T, args ...string) (*instanceSpec, error) {
	t.Helper()
	var f instanceFlags
	fs := pflag.NewFlagSet("instance", pflag.ContinueOnError)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f.check()
}

// TestInstanceFlagsReportEveryProblem gives `tessera instance` many bad
// flags at once: it must name every problem in one error, and start
// nothing.
func TestInstanceFlagsReportEveryProblem(t *testing.T) {
	clearInstanceEnv(t)
	dir := t.TempDir()
	short := writeSecret(t, dir, "secret", "too-short")
	_, stderr, code := tessera(t, "instance",
		"--secret-file", short,
		"--shard", "Shard/1",
		"--id", "",
		"--allowed-networks", "10.0.0.0/8,10.0.0.0,nope/8",
		"--postgres-listen", "0.0.0.0:5432",
		"--sidecar-listen", "127.0.0.1",
		"--session-listen", "127.0.0.1:0", "--session-advertise", "10.0.0.1:6501",
		"--sidecar-tls-key", filepath.Join(dir, "key.pem"),
		"--sidecar-tls-client-ca", filepath.Join(dir, "ca.pem"),
		"--log-level", "loud",
		"--isolation-fence", "50ms",
	)
	if code == 0 {
		t.Fatalf("tessera instance accepted bad flags: %s", stderr)
	}
	for _, want := range []string{
		"--etcd (TESSERA_ETCD) is required",
		"has 9 characters: at least 16",
		"--postgres-password-file (TESSERA_POSTGRES_PASSWORD_FILE) is required",
		`--shard "Shard/1"`,
		"--id (TESSERA_INSTANCE_ID) is required",
		"--zone (TESSERA_ZONE) is required",
		"--dir (TESSERA_INSTANCE_DIR) is required",
		`allowed network "10.0.0.0" is not a CIDR`,
		`allowed network "nope/8" is not a CIDR`,
		"--postgres-advertise is required: --postgres-listen listens on every interface",
		"--sidecar-listen: address 127.0.0.1: missing port",
		`--session-advertise "10.0.0.1:6501": --session-listen picks a free port`,
		"sidecar TLS needs both --sidecar-tls-cert and --sidecar-tls-key",
		"--sidecar-tls-key: stat",
		"--sidecar-tls-client-ca: stat",
		`--log-level "loud"`,
		"--isolation-fence 50ms: want 0 (off) or at least 200ms",
		"17 problem(s)",
	} {
		if !strings.Contains(stderr, want) {
			t.Errorf("the error lacks %q:\n%s", want, stderr)
		}
	}
	if strings.Contains(stderr, `"10.0.0.0/8"`) {
		t.Errorf("the good network is reported:\n%s", stderr)
	}
}

// TestInstanceFlagsFromEnvironment configures an instance from TESSERA_*
// variables alone, and checks that a flag overrides its variable.
func TestInstanceFlagsFromEnvironment(t *testing.T) {
	clearInstanceEnv(t)
	dir := t.TempDir()
	env := map[string]string{
		"TESSERA_ETCD":                   "http://10.0.0.9:2379, http://10.0.0.10:2379",
		"TESSERA_CLUSTER":                "prod",
		"TESSERA_SECRET_FILE":            writeSecret(t, dir, "secret", "0123456789abcdef-secret"),
		"TESSERA_POSTGRES_PASSWORD_FILE": writeSecret(t, dir, "pgpass", "pg-password"),
		"TESSERA_SHARD":                  "shard-1",
		"TESSERA_INSTANCE_ID":            "shard-1-b",
		"TESSERA_ZONE":                   "zone-b",
		"TESSERA_INSTANCE_DIR":           filepath.Join(dir, "inst"),
		"TESSERA_POSTGRES_LISTEN":        "*:5432",
		"TESSERA_POSTGRES_ADVERTISE":     "10.0.1.2:5432",
		"TESSERA_SIDECAR_LISTEN":         "0.0.0.0:6500",
		"TESSERA_SIDECAR_ADVERTISE":      "db-b.internal:6500",
		"TESSERA_SESSION_LISTEN":         "10.0.1.2:6501",
		"TESSERA_ALLOWED_NETWORKS":       "10.0.0.0/16, fd00::/64",
		"TESSERA_ISOLATION_FENCE":        "800ms",
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	spec, err := parseInstanceFlags(t, "--zone", "zone-c")
	if err != nil {
		t.Fatal(err)
	}
	if got := strings.Join(spec.endpoints, " "); got != "http://10.0.0.9:2379 http://10.0.0.10:2379" || spec.cluster != "prod" {
		t.Errorf("etcd %q cluster %q", got, spec.cluster)
	}
	pg, sc := spec.pg, spec.sc
	if pg.InstanceID != "shard-1-b" || pg.Host != "*" || pg.Port != 5432 || pg.SuperuserPassword != "pg-password" ||
		strings.Join(pg.AllowedNetworks, " ") != "10.0.0.0/16 fd00::/64" || pg.Dir != env["TESSERA_INSTANCE_DIR"] {
		t.Errorf("pgmanager config %+v", pg)
	}
	if sc.ShardUID != "shard-1" || sc.Zone != "zone-c" || sc.PostgresAddr != "10.0.1.2:5432" || sc.ListenAddr != "0.0.0.0:6500" ||
		sc.AdvertiseAddr != "db-b.internal:6500" || sc.SessionListenAddr != "10.0.1.2:6501" || sc.SessionAdvertiseAddr != "" ||
		sc.Secret != "0123456789abcdef-secret" || sc.IsolationFence != 800*time.Millisecond {
		t.Errorf("sidecar config %+v", sc)
	}
}

// TestInstanceIsolationFenceFlag: the sidecar's isolation fence is on by
// default (1 s, under the admin's 1.5 s detect window), 0 turns it off,
// and a value too short or not a duration is refused.
func TestInstanceIsolationFenceFlag(t *testing.T) {
	clearInstanceEnv(t)
	dir := t.TempDir()
	required := []string{"--etcd", "http://10.0.0.9:2379", "--shard", "shard-1", "--id", "shard-1-a", "--zone", "zone-a",
		"--dir", filepath.Join(dir, "inst"),
		"--secret-file", writeSecret(t, dir, "secret", "0123456789abcdef-secret"),
		"--postgres-password-file", writeSecret(t, dir, "pgpass", "pg-password")}
	for _, c := range []struct {
		arg  []string
		want time.Duration
		err  string
	}{
		{nil, time.Second, ""},
		{[]string{"--isolation-fence", "0"}, 0, ""},
		{[]string{"--isolation-fence", "750ms"}, 750 * time.Millisecond, ""},
		{[]string{"--isolation-fence", "100ms"}, 0, "--isolation-fence 100ms: want 0 (off) or at least 200ms"},
		{[]string{"--isolation-fence", "-1s"}, 0, "--isolation-fence -1s: want 0 (off)"},
		{[]string{"--isolation-fence", "soon"}, 0, `--isolation-fence "soon": want a duration`},
	} {
		spec, err := parseInstanceFlags(t, append(slices.Clone(required), c.arg...)...)
		switch {
		case c.err != "":
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("%v: %v; want an error with %q", c.arg, err, c.err)
			}
		case err != nil:
			t.Errorf("%v: %v", c.arg, err)
		case spec.sc.IsolationFence != c.want:
			t.Errorf("%v: isolation fence %v; want %v", c.arg, spec.sc.IsolationFence, c.want)
		}
	}
}

// TestInstanceTakesNoSecretOnTheCommandLine checks that every flag naming
// a password or secret takes a file, and that passing a password itself is
// refused before anything starts.
func TestInstanceTakesNoSecretOnTheCommandLine(t *testing.T) {
	clearInstanceEnv(t)
	newInstanceCommand().Flags().VisitAll(func(fl *pflag.Flag) {
		if (strings.Contains(fl.Name, "password") || strings.Contains(fl.Name, "secret")) && !strings.HasSuffix(fl.Name, "-file") {
			t.Errorf("--%s takes a secret on the command line", fl.Name)
		}
	})
	for _, flag := range []string{"--password", "--postgres-password", "--secret", "--etcd-password"} {
		_, stderr, code := tessera(t, "instance", flag, "hunter2-hunter2-hunter2")
		if code == 0 || !strings.Contains(stderr, "unknown flag: "+flag) {
			t.Errorf("%s: exit %d: %s", flag, code, stderr)
		}
	}
}
