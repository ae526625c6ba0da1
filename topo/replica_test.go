package topo_test

import (
	"strings"
	"testing"

	"github.com/tesseradb/tessera/topo"
)

// withReplica is minimal with group g's replica reads on two new shards,
// as a reads-first SwitchTraffic of a reshard of g to x and y leaves it.
var withReplica = strings.Replace(minimal, `{"shard_uid": "c", "start": "80"}]}`,
	`{"shard_uid": "c", "start": "80"}], "replica_key_ranges": [{"shard_uid": "x", "end": "80"}, {"shard_uid": "y", "start": "80"}]}`, 1)

func TestReplicaKeyRanges(t *testing.T) {
	plain := mustParse(t, minimal)
	if plain.HasReplicaReads() || plain.ReplicaReads() != plain {
		t.Fatal("a topology without replica key ranges has a replica view of its own")
	}
	top := mustParse(t, withReplica)
	if !top.HasReplicaReads() {
		t.Fatal("replica key ranges not seen")
	}
	if got := top.Resolve("db", "public", "t").Describe(); got != "g{[,40)=a [40,80)=b [80,)=c} by h(xxhash(id))" {
		t.Errorf("primary placement %s", got)
	}
	if got := top.ReplicaReads().Resolve("db", "public", "t").Describe(); got != "g{[,80)=x [80,)=y} by h(xxhash(id))" {
		t.Errorf("replica placement %s", got)
	}
	// The authoritative group is the same in both views.
	if got := top.ReplicaReads().Resolve("other", "s", "t").Describe(); got != "main{[,)=shard-0}" {
		t.Errorf("replica placement of the default %s", got)
	}
	doc, err := top.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	again := mustParse(t, string(doc))
	if changes := topo.Diff(top, again); len(changes) > 0 {
		t.Errorf("round trip changed %v", changes)
	}
}

// TestReplicaKeyRangesGuarded: setting or clearing replica key ranges is a
// placement change, which only a data-movement workflow may apply.
func TestReplicaKeyRangesGuarded(t *testing.T) {
	plain, switched := mustParse(t, minimal), mustParse(t, withReplica)
	for _, c := range []struct {
		name     string
		old, new *topo.Topology
	}{{"set", plain, switched}, {"cleared", switched, plain}} {
		changes := topo.Diff(c.old, c.new)
		if len(changes) != 1 || changes[0].Table != "replica reads of db.public.t" {
			t.Errorf("%s: changes %v, want the replica reads of db.public.t only", c.name, changes)
		}
	}
	if changes := topo.Diff(switched, switched); len(changes) > 0 {
		t.Errorf("no change listed %v", changes)
	}
}

func TestReplicaKeyRangesProblems(t *testing.T) {
	for _, c := range []struct{ name, from, to, want string }{
		{"gap", `{"shard_uid": "y", "start": "80"}`, `{"shard_uid": "y", "start": "90"}`,
			"shard_groups[1].replica_key_ranges: keys [80,90) belong to no shard"},
		{"overlap", `{"shard_uid": "x", "end": "80"}`, `{"shard_uid": "x", "end": "90"}`,
			"shard_groups[1].replica_key_ranges[1]: overlaps [,90)"},
		{"unknown key", `{"shard_uid": "x", "end": "80"}`, `{"shard_uid": "x", "end": "80", "role": "r"}`,
			"shard_groups[1].replica_key_ranges[0].role: unknown key"},
		{"no shard", `{"shard_uid": "x", "end": "80"}`, `{"end": "80"}`,
			"shard_groups[1].replica_key_ranges[0].shard_uid: required"},
		{"authoritative", `{"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]}`,
			`{"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}], "replica_key_ranges": [{"shard_uid": "shard-1"}]}`,
			"shard_groups[0].replica_key_ranges: the authoritative shard group does not move"},
		{"not an array", `"replica_key_ranges": [{"shard_uid": "x", "end": "80"}, {"shard_uid": "y", "start": "80"}]`,
			`"replica_key_ranges": {"shard_uid": "x"}`, "shard_groups[1].replica_key_ranges: must be an array"},
	} {
		t.Run(c.name, func(t *testing.T) {
			doc := strings.Replace(withReplica, c.from, c.to, 1)
			if doc == withReplica {
				t.Fatalf("replacement %q did not apply", c.from)
			}
			_, err := topo.Parse([]byte(doc))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("error %v, want %q", err, c.want)
			}
		})
	}
	// A single-range group without a shard index cannot gain ranges for
	// replica reads: the view would not know how to route.
	doc := strings.Replace(minimal, `{"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]}`,
		`{"uid": "main", "key_ranges": [{"shard_uid": "shard-0"}]}, {"uid": "one", "key_ranges": [{"shard_uid": "o"}],
		  "replica_key_ranges": [{"shard_uid": "o1", "end": "80"}, {"shard_uid": "o2", "start": "80"}]}`, 1)
	doc = strings.Replace(doc, `"tables": {"t": {"shard_group": "g"}}`, `"tables": {"t": {"shard_group": "g"}, "u": {"shard_group": "one"}}`, 1)
	_, err := topo.Parse([]byte(doc))
	if err == nil || !strings.Contains(err.Error(), "in the view of replica reads") || !strings.Contains(err.Error(), "neither it nor the table names a shard index") {
		t.Fatalf("error %v", err)
	}
}

// withTableReplica is minimal with table t's replica reads bound to the
// authoritative group, as a reads-first SwitchTraffic of a MoveTables of
// t to main leaves it.
var withTableReplica = strings.Replace(minimal, `"tables": {"t": {"shard_group": "g"}}`,
	`"tables": {"t": {"shard_group": "g", "replica_reads": {"shard_group": "main"}}}`, 1)

func TestTableReplicaReads(t *testing.T) {
	top := mustParse(t, withTableReplica)
	if !top.HasReplicaReads() {
		t.Fatal("replica_reads not seen")
	}
	if got := top.Resolve("db", "public", "t").Describe(); got != "g{[,40)=a [40,80)=b [80,)=c} by h(xxhash(id))" {
		t.Errorf("primary placement %s", got)
	}
	if got := top.ReplicaReads().Resolve("db", "public", "t").Describe(); got != "main{[,)=shard-0}" {
		t.Errorf("replica placement %s", got)
	}
	doc, err := top.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if again := mustParse(t, string(doc)); !again.HasReplicaReads() || len(topo.Diff(top, again)) > 0 {
		t.Errorf("round trip lost replica_reads: %s", doc)
	}
	if changes := topo.Diff(mustParse(t, minimal), top); len(changes) != 1 || changes[0].Table != "replica reads of db.public.t" {
		t.Errorf("changes %v", changes)
	}
	for _, c := range []struct{ name, to, want string }{
		{"unknown group", `"replica_reads": {"shard_group": "nope"}`, `databases.db.schemas.public.tables.t.shard_group: in the view of replica reads`},
		{"nested", `"replica_reads": {"shard_group": "main", "replica_reads": {}}`, "tables.t.replica_reads.replica_reads: unknown key"},
		{"not an object", `"replica_reads": "main"`, "tables.t.replica_reads: must be an object"},
	} {
		doc := strings.Replace(withTableReplica, `"replica_reads": {"shard_group": "main"}`, c.to, 1)
		if _, err := topo.Parse([]byte(doc)); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}
