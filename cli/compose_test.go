package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/tesseradb/tessera/topo"
)

// composeFile is what TestComposeFile reads of docker/compose.yaml.
type composeFile struct {
	Services map[string]struct {
		Image   string   `yaml:"image"`
		Command []string `yaml:"command"`
		Volumes []string `yaml:"volumes"`
	} `yaml:"services"`
	Secrets  map[string]struct{ File string } `yaml:"secrets"`
	Networks map[string]struct {
		IPAM struct {
			Config []struct{ Subnet string } `yaml:"config"`
		} `yaml:"ipam"`
	} `yaml:"networks"`
}

// TestComposeFile checks docker/compose.yaml without Docker (none runs
// here): it parses as YAML; every Tessera service's command is one the
// binary accepts, its flags parsed by the command's own flag set, and an
// instance's checked by `tessera instance`'s own validation (its secret
// files stood in for by files of the same names); the topology it applies
// validates and names the shards the instances join, each shard with
// three instances in three zones; every instance lets the compose
// network connect. `docker compose config` checks it too where the
// plugin exists.
func TestComposeFile(t *testing.T) {
	clearInstanceEnv(t)
	raw, err := os.ReadFile("../docker/compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var cf composeFile
	if err := yaml.Unmarshal(raw, &cf); err != nil {
		t.Fatalf("docker/compose.yaml: %v", err)
	}
	secrets := t.TempDir()
	for name := range cf.Secrets {
		writeSecret(t, secrets, name, "a-secret-long-enough-"+name)
	}
	subnets := map[string]bool{}
	for _, n := range cf.Networks {
		for _, c := range n.IPAM.Config {
			subnets[c.Subnet] = true
		}
	}

	kinds := map[string][]string{} // subcommand → services
	zones := map[string][]string{} // shard → zones of its instances
	var applied string
	ids := map[string]bool{}
	for name, svc := range cf.Services {
		if svc.Image != "tessera" && svc.Image != "tessera-instance" {
			continue
		}
		if len(svc.Command) == 0 {
			t.Errorf("%s: no command", name)
			continue
		}
		cmd, rest, err := newRootCommand(Options{}).Find(svc.Command)
		if err != nil || cmd.Name() == "tessera" {
			t.Errorf("%s: %v is no tessera command (%v)", name, svc.Command, err)
			continue
		}
		kinds[cmd.Name()] = append(kinds[cmd.Name()], name)
		if err := cmd.ParseFlags(rest); err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if cmd.Name() == "apply" {
			args := cmd.Flags().Args()
			if len(args) != 1 {
				t.Errorf("%s: topo apply of %v", name, args)
				continue
			}
			for _, v := range svc.Volumes {
				if src, dst, ok := strings.Cut(strings.TrimSuffix(v, ":ro"), ":"); ok && dst == args[0] {
					applied = filepath.Join("../docker", src)
				}
			}
		}
		if cmd.Name() != "instance" {
			continue
		}
		if svc.Image != "tessera-instance" {
			t.Errorf("%s: an instance needs the image with Postgres (tessera-instance), not %s", name, svc.Image)
		}
		args := make([]string, len(rest))
		for i, a := range rest {
			args[i] = strings.ReplaceAll(a, "/run/secrets/", secrets+"/")
		}
		spec, err := parseInstanceFlags(t, args...)
		if err != nil {
			t.Errorf("%s: tessera instance refuses its flags: %v", name, err)
			continue
		}
		if ids[spec.sc.InstanceID] {
			t.Errorf("%s: instance id %s used twice", name, spec.sc.InstanceID)
		}
		ids[spec.sc.InstanceID] = true
		zones[spec.sc.ShardUID] = append(zones[spec.sc.ShardUID], spec.sc.Zone)
		fl := cmd.Flags().Lookup("allowed-networks")
		if fl == nil || !subnets[strings.Trim(fl.Value.String(), "[]")] {
			t.Errorf("%s: --allowed-networks %v is not the compose network's subnet %v", name, fl, subnets)
		}
	}
	for kind, want := range map[string]int{"router": 2, "worker": 1, "instance": 6, "apply": 1} {
		if len(kinds[kind]) != want {
			t.Errorf("%d %s services (%v), want %d", len(kinds[kind]), kind, kinds[kind], want)
		}
	}
	if applied == "" {
		t.Fatal("no topology file mounted where topo apply reads it")
	}
	doc, err := os.ReadFile(applied)
	if err != nil {
		t.Fatal(err)
	}
	top, err := topo.Parse(doc)
	if err != nil {
		t.Fatalf("%s: %v", applied, err)
	}
	shards := top.Shards()
	slices.Sort(shards)
	var joined []string
	for shard, zs := range zones {
		joined = append(joined, shard)
		slices.Sort(zs)
		if len(zs) != 3 || len(slices.Compact(slices.Clone(zs))) != 3 {
			t.Errorf("shard %s: instances in zones %v, want three in three zones", shard, zs)
		}
	}
	slices.Sort(joined)
	if !slices.Equal(shards, joined) {
		t.Errorf("the topology's shards %v, the instances join %v", shards, joined)
	}
	docker, err := exec.LookPath("docker")
	if err == nil && exec.Command(docker, "compose", "version").Run() == nil {
		if out, err := exec.Command(docker, "compose", "-f", "../docker/compose.yaml", "config", "-q").CombinedOutput(); err != nil {
			t.Errorf("docker compose config: %v\n%s", err, out)
		}
	} else {
		t.Log("no docker compose plugin here: docker compose config not run")
	}
}
