package topo_test

import (
	"strings"
	"testing"

	"github.com/tesseradb/tessera/topo"
)

func mustParse(t *testing.T, doc string) *topo.Topology {
	t.Helper()
	top, err := topo.Parse([]byte(doc))
	if err != nil {
		t.Fatal(err)
	}
	return top
}

func TestDiff(t *testing.T) {
	base := mustParse(t, minimal)
	cases := []struct {
		name, from, to string
		want           []string // tables reported, in order
	}{
		{"identical", "", "", nil},
		{"ranges move", `"end": "40"}, {"shard_uid": "b", "start": "40"`, `"end": "50"}, {"shard_uid": "b", "start": "50"`, []string{"db.public.t"}},
		{"shard renamed", `{"shard_uid": "c", "start": "80"}`, `{"shard_uid": "d", "start": "80"}`, []string{"db.public.t"}},
		{"index type changes", `"type": "xxhash", "columns": ["id"]`, `"type": "range", "columns": ["id"]`, []string{"db.public.t"}},
		{"index column changes", `"columns": ["id"]`, `"columns": ["other_id"]`, []string{"db.public.t"}},
		{"table moves group", `"shard_group": "g"`, `"shard_group": "main"`, []string{"db.public.t"}},
		{"new unused group", `{"uid": "main",`, `{"uid": "spare", "key_ranges": [{"shard_uid": "z"}]}, {"uid": "main",`, nil},
		{"new database in the default group", `"databases": {`, `"databases": {"other": {"default_shard_group": "main"}, `, nil},
		{"schema default changes", `"public": {"tables"`, `"public": {"default_shard_group": "g", "tables"`, []string{"db.public.*"}},
		{"table added to another group", `"tables": {"t": {"shard_group": "g"}}`, `"tables": {"t": {"shard_group": "g"}, "u": {"shard_group": "g"}}`, []string{"db.public.u"}},
		{"table listed in its default group", `"tables": {"t": {"shard_group": "g"}}`, `"tables": {"t": {"shard_group": "g"}, "u": {"shard_group": "main"}}`, nil},
		{"alternate added", `"tables": {"t": {"shard_group": "g"}}`, `"tables": {"t": {"shard_group": "g", "alternate_shard_indexes": ["x"]}}`, []string{"db.public.t"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			doc := minimal
			if c.from != "" {
				doc = strings.Replace(minimal, c.from, c.to, 1)
				if doc == minimal {
					t.Fatalf("replacement %q did not apply", c.from)
				}
			}
			if c.name == "alternate added" {
				doc = strings.Replace(doc, `"shard_indexes": {`, `"shard_indexes": {"x": {"type": "xxhash", "columns": ["x"]}, `, 1)
			}
			changes := topo.Diff(base, mustParse(t, doc))
			var got []string
			for _, ch := range changes {
				got = append(got, ch.Table)
				if ch.Old == ch.New {
					t.Errorf("change %v has equal sides", ch)
				}
			}
			if strings.Join(got, " ") != strings.Join(c.want, " ") {
				t.Errorf("changes %v, want tables %v", changes, c.want)
			}
		})
	}
}
