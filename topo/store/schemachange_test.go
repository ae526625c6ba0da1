package store

import (
	"context"
	"testing"
	"time"
)

// TestSchemaChanges: an announcement is watched by database, a second
// one of the same database is a change with a new revision, and a bad
// database name is refused before anything is written.
func TestSchemaChanges(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Dial(ctx, EtcdEndpoints, "schema-changes-test")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, bad := range []string{"", "a/b"} {
		if err := s.AnnounceSchemaChange(ctx, SchemaChange{Database: bad}); err == nil {
			t.Errorf("database %q accepted", bad)
		}
	}
	watch, err := s.WatchSchemaChanges(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-watch; len(got) != 0 {
		t.Fatalf("first list = %+v, want none", got)
	}
	if err := s.AnnounceSchemaChange(ctx, SchemaChange{Database: "store", By: "router r1", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	first := <-watch
	if len(first) != 1 || first[0].Database != "store" || first[0].By != "router r1" || first[0].Revision == 0 {
		t.Fatalf("watched %+v", first)
	}
	if err := s.AnnounceSchemaChange(ctx, SchemaChange{Database: "store", By: "onlineddl-store-public.t"}); err != nil {
		t.Fatal(err)
	}
	second := <-watch
	if len(second) != 1 || second[0].Revision <= first[0].Revision || second[0].By != "onlineddl-store-public.t" {
		t.Fatalf("after a second announcement: %+v (first %+v)", second, first)
	}
}
