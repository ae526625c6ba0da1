package cli

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tesseradb/tessera/workflows"
)

// TestReshardInput: the flags and the JSON file make the same input, and
// a malformed one is refused before Temporal is reached.
func TestReshardInput(t *testing.T) {
	f := reshardFlags{database: "shop", group: "data", targets: []string{"t1=-80", "t2=80-c0", "t3=c0-"}}
	in, err := f.input()
	if err != nil {
		t.Fatal(err)
	}
	want := workflows.ReshardInput{Database: "shop", ShardGroup: "data", TargetKeyRanges: []workflows.KeyRangeInput{
		{ShardUID: "t1", End: "80"}, {ShardUID: "t2", Start: "80", End: "c0"}, {ShardUID: "t3", Start: "c0"}}}
	if in.Summary() != want.Summary() || len(in.TargetKeyRanges) != 3 || in.TargetKeyRanges[1] != want.TargetKeyRanges[1] {
		t.Fatalf("input %+v, want %+v", in, want)
	}
	file := filepath.Join(t.TempDir(), "in.json")
	doc := `{"database":"shop","shard_group":"data","target_key_ranges":[{"shard_uid":"t1","end":"80"},{"shard_uid":"t2","start":"80","end":"c0"},{"shard_uid":"t3","start":"c0"}]}`
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	fromFile, err := (&reshardFlags{inputFile: file}).input()
	if err != nil || fromFile.Summary() != in.Summary() {
		t.Fatalf("from the file: %+v, %v; want %+v", fromFile, err, in)
	}

	nowhere := "--temporal=" + closedAddr(t)
	typo := filepath.Join(t.TempDir(), "typo.json")
	if err := os.WriteFile(typo, []byte(`{"database":"shop","shard_grop":"data"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"reshard", nowhere, "--shard-group", "data", "--target", "t1=-"}, "--database and --shard-group (or an --input file naming them) are required (SQLSTATE 22023)"},
		{[]string{"reshard", nowhere, "--database", "shop", "--shard-group", "data"}, "at least one --target"},
		{[]string{"reshard", nowhere, "--database", "shop", "--shard-group", "data", "--target", "t1:80"}, `--target "t1:80": want SHARD=START-END`},
		{[]string{"reshard", nowhere, "--input", typo}, `unknown field "shard_grop" (SQLSTATE 22023)`},
		{[]string{"reshard", nowhere, "--input", filepath.Join(t.TempDir(), "none.json")}, "(SQLSTATE 58P01)"},
		{[]string{"reshard", nowhere, "--database", "shop", "--shard-group", "data", "--cancel", "--switch-traffic"}, "none of the others can be"},
		{[]string{"vdiff", nowhere, "--database", "shop"}, "--database and --shard-group are required (SQLSTATE 22023)"},
		{[]string{"workflow", "show", nowhere}, "accepts 1 arg(s)"},
		// Valid input: only then is Temporal reached.
		{[]string{"reshard", nowhere, "--database", "shop", "--shard-group", "data", "--cancel"}, "cannot reach Temporal"},
	} {
		_, stderr, code := tessera(t, c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("tessera %s: exit %d, stderr %q; want %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}

// TestLiveLineWithoutTerminal: off a terminal, progress comes as plain
// lines, one per change, with no control characters.
func TestLiveLineWithoutTerminal(t *testing.T) {
	var out bytes.Buffer
	l := newLiveLine(&out)
	for _, p := range []string{"phase copying", "phase copying", "phase catching_up", "phase catching_up", "phase ready_for_cutover"} {
		l.show(p)
	}
	l.done()
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) != 3 || strings.ContainsAny(out.String(), "\r\x1b") ||
		!strings.HasSuffix(lines[0], "  phase copying") || !strings.HasSuffix(lines[2], "  phase ready_for_cutover") {
		t.Fatalf("output %q", out.String())
	}
}
