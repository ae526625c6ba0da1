package store

import (
	"context"
	"testing"
	"time"
)

// TestTableBuffers: a signal is stored, watched, replaced and cleared;
// an invalid one is refused before it is written.
func TestTableBuffers(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Dial(ctx, EtcdEndpoints, "table-buffers-test")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	for _, bad := range []TableBuffer{
		{ID: "", Database: "d", Tables: []string{"public.t"}, For: time.Second},
		{ID: "a/b", Database: "d", Tables: []string{"public.t"}, For: time.Second},
		{ID: "x", Tables: []string{"public.t"}, For: time.Second},
		{ID: "x", Database: "d", Tables: []string{"t"}, For: time.Second},
		{ID: "x", Database: "d", For: time.Second},
		{ID: "x", Database: "d", Tables: []string{"public.t"}},
	} {
		if err := s.SetTableBuffer(ctx, bad); err == nil {
			t.Errorf("SetTableBuffer(%+v) accepted", bad)
		}
	}
	watch, err := s.WatchTableBuffers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if got := <-watch; len(got) != 0 {
		t.Fatalf("first list = %+v, want none", got)
	}
	b := TableBuffer{ID: "reshard-store-g", Database: "store", Tables: []string{"public.orders", "public.items"},
		Reason: "cutover", For: 5 * time.Second, Set: time.Now()}
	if err := s.SetTableBuffer(ctx, b); err != nil {
		t.Fatal(err)
	}
	got := <-watch
	if len(got) != 1 || got[0].ID != b.ID || got[0].Database != "store" || len(got[0].Tables) != 2 || got[0].For != b.For || got[0].Revision == 0 {
		t.Fatalf("watched %+v", got)
	}
	if list, err := s.ListTableBuffers(ctx); err != nil || len(list) != 1 || list[0].Reason != "cutover" {
		t.Fatalf("ListTableBuffers = %+v, %v", list, err)
	}
	if err := s.ClearTableBuffer(ctx, b.ID); err != nil {
		t.Fatal(err)
	}
	if got := <-watch; len(got) != 0 {
		t.Fatalf("after clear: %+v", got)
	}
	if err := s.ClearTableBuffer(ctx, b.ID); err != nil {
		t.Fatalf("clearing again: %v", err)
	}
}
