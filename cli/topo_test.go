package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const topologies = "../testdata/topologies"

// tessera runs the command line in-process.
func tessera(t *testing.T, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(args, &out, &errOut, Options{})
	return out.String(), errOut.String(), code
}

func TestTopoValidate(t *testing.T) {
	out, _, code := tessera(t, "topo", "validate", filepath.Join(topologies, "store_xxhash.json"))
	if code != 0 || out != "ok\n" {
		t.Fatalf("valid file: exit %d, output %q", code, out)
	}
	bad := filepath.Join(t.TempDir(), "bad.json")
	doc := `{"authoritative_shard_group": "main", "colour": "red",
	 "shard_groups": [{"uid": "main", "key_ranges": [{"shard_uid": "s0"}]},
	  {"uid": "g", "key_ranges": [{"shard_uid": "a", "end": "40"}, {"shard_uid": "b", "start": "30"}]}]}`
	if err := os.WriteFile(bad, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _, code = tessera(t, "topo", "validate", bad)
	if code != 1 {
		t.Fatalf("invalid file: exit %d", code)
	}
	for _, want := range []string{"colour: unknown key", "shard_groups[1].key_ranges[1]: overlaps [,40)"} {
		if !strings.Contains(out, want) {
			t.Errorf("output lacks %q:\n%s", want, out)
		}
	}
	if _, _, code := tessera(t, "topo", "validate", filepath.Join(t.TempDir(), "missing.json")); code != 1 {
		t.Errorf("missing file: exit %d", code)
	}
}

// TestTopoRouteSeedOutcomes runs every case of testdata/topologies/routes.json
// through the command line.
func TestTopoRouteSeedOutcomes(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(topologies, "routes.json"))
	if err != nil {
		t.Fatal(err)
	}
	var cases []struct {
		Note, File, Table, Type, Value, SQLState string
		IndexFlag                                string `json:"index_flag"`
		routeResult
	}
	if err := json.Unmarshal(doc, &cases); err != nil {
		t.Fatal(err)
	}
	for _, c := range cases {
		args := []string{"topo", "route", "--file", filepath.Join(topologies, c.File), "--table", c.Table, "--type", c.Type}
		if c.IndexFlag != "" {
			args = append(args, "--index", c.IndexFlag)
		}
		out, errOut, code := tessera(t, append(args, "--", c.Value)...)
		if c.SQLState != "" {
			if code != 1 || !strings.Contains(errOut, c.SQLState) {
				t.Errorf("%s: exit %d, stderr %q; want a failure with SQLSTATE %s", c.Note, code, errOut, c.SQLState)
			}
			continue
		}
		want, _ := json.Marshal(c.routeResult)
		if code != 0 || out != string(want)+"\n" {
			t.Errorf("%s: exit %d, output %q %s; want %s", c.Note, code, out, errOut, want)
		}
	}
}

func TestTopoRouteBinaryAndErrors(t *testing.T) {
	file := filepath.Join(topologies, "store_xxhash.json")
	out, _, code := tessera(t, "topo", "route", "--file", file, "--table", "store.public.customers", "--type", "int4", "--binary", "0000002a")
	if code != 0 || !strings.Contains(out, `"routing_key":"2e4fe982b68910ac"`) {
		t.Errorf("binary int4 42: exit %d, %q", code, out)
	}
	for _, args := range [][]string{
		{"--table", "store.customers", "--type", "bigint", "1"},
		{"--table", "store.public.customers", "--type", "bigint", "--index", "nope", "1"},
		{"--table", "store.public.customers", "--type", "bigint", "--binary", "zz"},
		{"--table", "store.public.customers", "1"},
	} {
		if _, _, code := tessera(t, append([]string{"topo", "route", "--file", file}, args...)...); code == 0 {
			t.Errorf("%v succeeded", args)
		}
	}
}

func TestTopoDiff(t *testing.T) {
	a, b := filepath.Join(topologies, "store_xxhash.json"), filepath.Join(topologies, "store_modulo.json")
	if out, _, code := tessera(t, "topo", "diff", a, a); code != 0 || out != "no placement changes\n" {
		t.Errorf("same file: exit %d, %q", code, out)
	}
	out, _, code := tessera(t, "topo", "diff", a, b)
	if code != 1 || !strings.Contains(out, "store.public.customers:") || !strings.Contains(out, "store.public.orders:") {
		t.Errorf("xxhash -> modulo: exit %d, %q", code, out)
	}
	if _, _, code := tessera(t, "topo", "diff", a, "/nonexistent"); code != 2 {
		t.Errorf("missing file: exit %d, want 2", code)
	}
}

func TestEveryCommandHasHelp(t *testing.T) {
	walk := func(path []string) {
		out, _, code := tessera(t, append(path, "--help")...)
		if code != 0 || !strings.Contains(out, "Usage:") {
			t.Errorf("%v --help: exit %d", path, code)
		}
	}
	root := newRootCommand(Options{})
	for _, c := range root.Commands() {
		walk([]string{c.Name()})
		for _, sub := range c.Commands() {
			walk([]string{c.Name(), sub.Name()})
			if sub.Short == "" {
				t.Errorf("%s %s has no description", c.Name(), sub.Name())
			}
		}
	}
}
