package cli

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tesseradb/tessera/replicator"
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
		{[]string{"reshard", nowhere, "--database", "shop", "--shard-group", "data", "--complete", "--reverse-traffic"}, "none of the others can be"},
		{[]string{"reshard", nowhere, "--database", "shop", "--shard-group", "data", "--reads"}, "--reads goes with --switch-traffic or --reverse-traffic (SQLSTATE 22023)"},
		{[]string{"reshard", nowhere, "--database", "shop", "--shard-group", "data", "--cancel", "--reads"}, "--reads goes with --switch-traffic or --reverse-traffic"},
		{[]string{"reshard", nowhere, "--database", "shop", "--shard-group", "data", "--switch-traffic", "--reads"}, "cannot reach Temporal"},
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

// TestPrintDiff: each kind of difference is printed with its key, shard
// and, for a change, its columns; the counts sum up per table.
func TestPrintDiff(t *testing.T) {
	report := replicator.DiffReport{Table: "public.orders", Done: true, Chunks: 3, DifferingChunks: 2, SourceRows: 300, TargetRows: 301,
		Counts: map[replicator.DiffKind]int64{replicator.DiffMissing: 1, replicator.DiffExtra: 1, replicator.DiffChanged: 1, replicator.DiffWrongShard: 1},
		Differences: []replicator.Difference{
			{Kind: replicator.DiffMissing, Key: []string{"a", "10"}, Shard: "t1"},
			{Kind: replicator.DiffExtra, Key: []string{"a", "900011"}, Shard: "t2"},
			{Kind: replicator.DiffChanged, Key: []string{"b", "25"}, Shard: "t1", Columns: []string{"note"}},
			{Kind: replicator.DiffWrongShard, Key: []string{"c", "40"}, Shard: "t2"},
		}, Unlisted: 0}
	raw, err := json.Marshal(report)
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	p := workflows.ReshardProgress{Phase: workflows.PhaseReadyForCutover, LastDiff: &workflows.DiffTablesResult{
		Reports: map[string]json.RawMessage{"public.orders": raw}, Differences: 4, Done: true}}
	if err := printDiff(&out, "reshard-shop-data", p); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"reshard-shop-data (phase ready_for_cutover): last VDiff 4 differences\n",
		"public.orders  true  3       300          301          4 (changed 1, extra 1, missing 1, wrong_shard 1)\n",
		"  public.orders: missing key (a, 10) on t1\n",
		"  public.orders: extra key (a, 900011) on t2\n",
		"  public.orders: changed key (b, 25) on t1, columns note\n",
		"  public.orders: wrong_shard key (c, 40) on t2\n",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if err := printDiff(&out, "reshard-shop-data", workflows.ReshardProgress{Phase: workflows.PhaseCopying}); err != nil ||
		!strings.Contains(out.String(), "has run no VDiff yet") {
		t.Errorf("before any VDiff: %q, %v", out.String(), err)
	}
}

// TestLiveLineOnTerminal: on a terminal, the line is redrawn in place at
// every poll, and ended with a newline once.
func TestLiveLineOnTerminal(t *testing.T) {
	var out bytes.Buffer
	l := &liveLine{w: &out, tty: true}
	l.show("phase copying")
	l.show("phase copying")
	l.show("phase catching_up")
	l.done()
	l.done()
	if got, want := strings.Count(out.String(), "\r\x1b[K"), 3; got != want {
		t.Errorf("%d redraws, want %d: %q", got, want, out.String())
	}
	if !strings.HasSuffix(out.String(), "  phase catching_up\n") || strings.Count(out.String(), "\n") != 1 {
		t.Errorf("output %q", out.String())
	}
	if newLiveLine(&out).tty {
		t.Error("a buffer taken for a terminal")
	}
}

// TestProgressLineShowsReadsSwitched: the progress line says when replica
// reads alone are switched, and nothing of it otherwise.
func TestProgressLineShowsReadsSwitched(t *testing.T) {
	p := reshardLive{ReshardProgress: workflows.ReshardProgress{Phase: workflows.PhaseReadyForCutover}}
	if l := p.line(); strings.Contains(l, "reads") {
		t.Fatalf("line without a reads switch: %s", l)
	}
	p.ReadsSwitched = &workflows.ReadsSwitch{Revision: 9}
	if l := p.line(); !strings.HasSuffix(l, " | replica reads switched (revision 9)") {
		t.Fatalf("line with reads switched: %s", l)
	}
}
