package topo_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/tesseradb/tessera/topo"
)

var topoParse = topo.Parse

// FuzzParse feeds arbitrary documents to the parser: it must never panic,
// and whatever it accepts must survive a marshal and re-parse unchanged.
func FuzzParse(f *testing.F) {
	files, _ := filepath.Glob(filepath.Join(topologies, "*.json"))
	for _, name := range files {
		if doc, err := os.ReadFile(name); err == nil {
			f.Add(doc)
		}
	}
	f.Add([]byte(minimal))
	f.Add([]byte(withReplica))
	f.Add([]byte(withTableReplica))
	f.Add([]byte(`{"authoritative_shard_group":"m","shard_groups":[{"uid":"m","key_ranges":[{"shard_uid":"s","start":"","end":""}]}]}`))
	f.Fuzz(func(t *testing.T, doc []byte) {
		top, err := topo.Parse(doc)
		if err != nil {
			if _, ok := err.(*topo.ValidationError); !ok {
				t.Fatalf("error of type %T: %v", err, err)
			}
			return
		}
		out, err := top.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		again, err := topo.Parse(out)
		if err != nil {
			t.Fatalf("re-parse of %s: %v", out, err)
		}
		if changes := topo.Diff(top, again); len(changes) > 0 {
			t.Fatalf("round trip changed %v", changes)
		}
		// Routing over every group must find a shard for any key.
		for _, g := range top.ShardGroups {
			for _, k := range []uint64{0, 1 << 63, ^uint64(0)} {
				if g.ShardFor(k) == "" {
					t.Fatalf("group %s has no shard for %x", g.UID, k)
				}
			}
		}
	})
}
