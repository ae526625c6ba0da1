package twophase

import (
	"strings"
	"testing"
)

func TestGIDNamesItsCommitPoint(t *testing.T) {
	g := NewGenerator()
	for _, shard := range []string{"shard-0", "customer-shard-1", "odd:name%x"} {
		a, b := g.Next(shard), g.Next(shard)
		if a == b {
			t.Fatalf("two gids alike: %s", a)
		}
		if len(a) >= 200 {
			t.Fatalf("gid %s is longer than Postgres allows", a)
		}
		got, ok := CommitPoint(a)
		if !ok || got != shard {
			t.Fatalf("CommitPoint(%q) = %q, %v; want %q", a, got, ok, shard)
		}
	}
	if NewGenerator().Next("s") == NewGenerator().Next("s") {
		t.Fatal("two generators named a transaction alike")
	}
	for _, gid := range []string{"client-gid", "tessera:", "tessera::x:1", "tessera:a:b"} {
		if _, ok := CommitPoint(gid); ok {
			t.Fatalf("CommitPoint accepted %q", gid)
		}
	}
}

func TestCommittedNeedsTheSeal(t *testing.T) {
	gid := NewGenerator().Next("shard-1")
	seal := Seal("secret", gid)
	for _, c := range []struct {
		outcome, seal string
		want          bool
	}{
		{Commit, seal, true},
		{Abort, seal, false},
		{Commit, "", false},
		{Commit, Seal("other secret", gid), false},
		{Commit, Seal("secret", gid+"0"), false},
	} {
		if got := Committed("secret", gid, c.outcome, c.seal); got != c.want {
			t.Errorf("Committed(%q, %q) = %v, want %v", c.outcome, c.seal, got, c.want)
		}
	}
	if !strings.Contains(RecordCommit("secret", gid), seal) {
		t.Errorf("RecordCommit does not write the seal: %s", RecordCommit("secret", gid))
	}
}
