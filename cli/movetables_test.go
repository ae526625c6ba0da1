package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tesseradb/tessera/workflows"
)

// TestMoveTablesInput: the flags and the JSON file make the same input,
// and a malformed one is refused before Temporal is reached.
func TestMoveTablesInput(t *testing.T) {
	f := moveTablesFlags{database: "shop", tables: []string{"public.orders", "public.items"}, targetGroup: "archive"}
	in, err := f.input()
	if err != nil {
		t.Fatal(err)
	}
	if in.Summary() != "MoveTables public.orders, public.items of shop to shard group archive" || in.Source != nil {
		t.Fatalf("input %+v: %s", in, in.Summary())
	}
	file := filepath.Join(t.TempDir(), "in.json")
	doc := `{"database":"shop","tables":["public.orders","public.items"],"target_shard_group":"archive"}`
	if err := os.WriteFile(file, []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	fromFile, err := (&moveTablesFlags{inputFile: file}).input()
	if err != nil || fromFile.Summary() != in.Summary() {
		t.Fatalf("from the file: %+v, %v; want %+v", fromFile, err, in)
	}
	imp, err := (&moveTablesFlags{database: "shop", tables: []string{"legacy.orders"}, targetGroup: "archive", sourceSecret: "/etc/tessera/legacy.dsn"}).input()
	if err != nil || imp.Source == nil || imp.Source.ConnSecret != "/etc/tessera/legacy.dsn" || !strings.HasSuffix(imp.Summary(), "from an external Postgres") {
		t.Fatalf("import input %+v, %v", imp, err)
	}
	if id := workflows.MoveTablesID(in.Database, in.TargetShardGroup); id != "movetables-shop-archive" {
		t.Fatalf("workflow id %s", id)
	}

	nowhere := "--temporal=" + closedAddr(t)
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"movetables", nowhere, "--table", "orders", "--target-shard-group", "archive"}, "--database and --target-shard-group (or an --input file naming them) are required (SQLSTATE 22023)"},
		{[]string{"movetables", nowhere, "--database", "shop", "--target-shard-group", "archive"}, "at least one --table"},
		{[]string{"movetables", nowhere, "--database", "shop", "--target-shard-group", "archive", "--complete", "--cancel"}, "none of the others can be"},
		{[]string{"movetables", nowhere, "--database", "shop", "--target-shard-group", "archive", "--complete", "--reads"}, "--reads goes with --switch-traffic or --reverse-traffic (SQLSTATE 22023)"},
		{[]string{"movetables", nowhere, "--database", "shop", "--target-shard-group", "archive", "--reverse-traffic", "--reads"}, "cannot reach Temporal"},
		// Valid input: only then is Temporal reached.
		{[]string{"movetables", nowhere, "--database", "shop", "--target-shard-group", "archive", "--complete"}, "cannot reach Temporal"},
	} {
		_, stderr, code := tessera(t, c.args...)
		if code != 1 || !strings.Contains(stderr, c.want) {
			t.Errorf("tessera %s: exit %d, stderr %q; want %q", strings.Join(c.args, " "), code, stderr, c.want)
		}
	}
}
