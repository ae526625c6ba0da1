package storetest

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
)

func testGetEmpty(t *testing.T, s *store.Store) {
	_, err := s.GetTopology(testContext(t))
	if !errors.Is(err, store.ErrNoTopology) {
		t.Fatalf("GetTopology on an empty cluster: err = %v, want ErrNoTopology", err)
	}
	if code := pgerr.Code(err); code != pgerr.ConfigFileError {
		t.Errorf("SQLSTATE = %s, want %s", code, pgerr.ConfigFileError)
	}
}

func testApplyAndGet(t *testing.T, s *store.Store) {
	if rev := apply(t, s, baseDoc, store.ApplyOptions{}); rev != 1 {
		t.Fatalf("first apply: revision %d, want 1", rev)
	}
	wantStored(t, s, 1, baseDoc)
	next := spareGroupDoc("spare")
	if rev := apply(t, s, next, anyRev); rev != 2 {
		t.Fatalf("second apply: revision %d, want 2", rev)
	}
	wantStored(t, s, 2, next)
}

// wantMismatch checks that err is a *RevisionMismatchError with the given
// revisions.
func wantMismatch(t *testing.T, err error, expected, actual int64) {
	t.Helper()
	var m *store.RevisionMismatchError
	if !errors.As(err, &m) {
		t.Fatalf("err = %v, want a RevisionMismatchError", err)
	}
	if m.Expected != expected || m.Actual != actual {
		t.Errorf("mismatch = {Expected %d, Actual %d}, want {%d, %d}", m.Expected, m.Actual, expected, actual)
	}
}

func testCompareAndSwap(t *testing.T, s *store.Store) {
	ctx := testContext(t)
	base := parse(t, baseDoc)

	_, err := s.ApplyTopology(ctx, base, store.ApplyOptions{ExpectedRevision: 3})
	wantMismatch(t, err, 3, 0)
	if _, err := s.GetTopology(ctx); !errors.Is(err, store.ErrNoTopology) {
		t.Fatalf("after a refused create, GetTopology: err = %v, want ErrNoTopology", err)
	}

	if rev := apply(t, s, baseDoc, store.ApplyOptions{ExpectedRevision: 0}); rev != 1 {
		t.Fatalf("create with expected revision 0: revision %d, want 1", rev)
	}

	spare := parse(t, spareGroupDoc("spare"))
	_, err = s.ApplyTopology(ctx, spare, store.ApplyOptions{ExpectedRevision: 0})
	wantMismatch(t, err, 0, 1)
	_, err = s.ApplyTopology(ctx, spare, store.ApplyOptions{ExpectedRevision: 5})
	wantMismatch(t, err, 5, 1)
	wantStored(t, s, 1, baseDoc)

	if rev := apply(t, s, spareGroupDoc("spare"), store.ApplyOptions{ExpectedRevision: 1}); rev != 2 {
		t.Fatalf("apply with the right expected revision: revision %d, want 2", rev)
	}
	wantStored(t, s, 2, spareGroupDoc("spare"))
}

func testConcurrentCompareAndSwap(t *testing.T, s *store.Store) {
	ctx := testContext(t)
	apply(t, s, baseDoc, store.ApplyOptions{})
	const writers = 8
	docs := make([]*topo.Topology, writers)
	for i := range docs {
		docs[i] = parse(t, spareGroupDoc(fmt.Sprintf("spare%d", i)))
	}
	revs := make([]int64, writers)
	errs := make([]error, writers)
	var wg sync.WaitGroup
	for i := range writers {
		wg.Go(func() {
			revs[i], errs[i] = s.ApplyTopology(ctx, docs[i], store.ApplyOptions{ExpectedRevision: 1})
		})
	}
	wg.Wait()
	winner := -1
	for i, err := range errs {
		if err == nil {
			if winner >= 0 {
				t.Fatalf("writers %d and %d both won", winner, i)
			}
			winner = i
			if revs[i] != 2 {
				t.Errorf("winner's revision = %d, want 2", revs[i])
			}
			continue
		}
		wantMismatch(t, err, 1, 2)
	}
	if winner < 0 {
		t.Fatal("no writer won")
	}
	wantStored(t, s, 2, spareGroupDoc(fmt.Sprintf("spare%d", winner)))
}

func testPlacementGuard(t *testing.T, s *store.Store) {
	ctx := testContext(t)
	apply(t, s, baseDoc, store.ApplyOptions{})
	for name, doc := range map[string]string{"ranges": resplitDoc, "group": regroupDoc} {
		_, err := s.ApplyTopology(ctx, parse(t, doc), anyRev)
		var pc *store.PlacementChangeError
		if !errors.As(err, &pc) {
			t.Fatalf("changing customers' %s: err = %v, want a PlacementChangeError", name, err)
		}
		found := false
		for _, c := range pc.Changes {
			found = found || c.Table == "store.public.customers"
		}
		if !found {
			t.Errorf("changing customers' %s: changes %v do not list store.public.customers", name, pc.Changes)
		}
		msg := err.Error()
		lines := strings.Split(msg, "\n")
		for _, c := range pc.Changes {
			listed := false
			for _, l := range lines {
				listed = listed || strings.TrimSpace(l) == c.String()
			}
			if !listed {
				t.Errorf("error does not list %q on a line of its own:\n%s", c, msg)
			}
		}
		if !strings.Contains(msg, "force") {
			t.Errorf("error does not mention force:\n%s", msg)
		}
		wantStored(t, s, 1, baseDoc)
	}
	if rev := apply(t, s, resplitDoc, store.ApplyOptions{ExpectedRevision: 1, Force: true}); rev != 2 {
		t.Fatalf("forced apply: revision %d, want 2", rev)
	}
	wantStored(t, s, 2, resplitDoc)
}

func testUnrelatedChanges(t *testing.T, s *store.Store) {
	apply(t, s, baseDoc, store.ApplyOptions{})
	if rev := apply(t, s, spareGroupDoc("spare"), anyRev); rev != 2 {
		t.Fatalf("adding an unused group: revision %d, want 2", rev)
	}
	if rev := apply(t, s, newDatabaseDoc, anyRev); rev != 3 {
		t.Fatalf("adding a database: revision %d, want 3", rev)
	}
	wantStored(t, s, 3, newDatabaseDoc)
}

// reorderedBaseDoc is baseDoc with its keys in another order and spaced
// out: the same topology.
const reorderedBaseDoc = `{
  "databases": {"store": {"schemas": {"public": {"tables": {"customers": {"shard_group": "customer_data"}}}}}},
  "shard_indexes": {"h": {"columns": ["customer_id"], "type": "xxhash"}},
  "shard_groups": [
    {"key_ranges": [{"shard_uid": "shard-0"}], "uid": "main"},
    {"default_shard_index": "h", "uid": "customer_data",
     "key_ranges": [{"end": "80", "shard_uid": "s1"}, {"start": "80", "shard_uid": "s2"}]}
  ],
  "authoritative_shard_group": "main"
}`

func testIdenticalApply(t *testing.T, s *store.Store) {
	apply(t, s, baseDoc, store.ApplyOptions{})
	for _, c := range []struct {
		doc  string
		opts store.ApplyOptions
	}{
		{baseDoc, anyRev},
		{baseDoc, store.ApplyOptions{ExpectedRevision: 1}},
		{reorderedBaseDoc, anyRev},
	} {
		if rev := apply(t, s, c.doc, c.opts); rev != 1 {
			t.Errorf("re-applying the same topology (%+v): revision %d, want 1", c.opts, rev)
		}
	}
	wantStored(t, s, 1, baseDoc)
}

func testInvalidStoredDocument(t *testing.T, s *store.Store) {
	ctx := testContext(t)
	for i, garbage := range []string{"", "{not json", "[]", `{"shard_groups":[]}`} {
		if _, err := s.Client().Put(ctx, s.TopologyKey(), garbage); err != nil {
			t.Fatal(err)
		}
		rev := int64(i + 1)
		_, err := s.GetTopology(ctx)
		var inv *store.InvalidTopologyError
		if !errors.As(err, &inv) {
			t.Fatalf("GetTopology of %q: err = %v, want an InvalidTopologyError", garbage, err)
		}
		if inv.Revision != rev || inv.Key != s.TopologyKey() {
			t.Errorf("GetTopology of %q: error names %s at %d, want %s at %d", garbage, inv.Key, inv.Revision, s.TopologyKey(), rev)
		}
		if errors.Is(err, store.ErrNoTopology) {
			t.Errorf("GetTopology of %q: err %v is ErrNoTopology", garbage, err)
		}
		var coded interface{ SQLState() string }
		if !errors.As(err, &coded) || coded.SQLState() != pgerr.ConfigFileError {
			t.Errorf("GetTopology of %q: err %v does not carry SQLSTATE %s", garbage, err, pgerr.ConfigFileError)
		}
	}
	var ve *topo.ValidationError
	if _, err := s.GetTopology(ctx); !errors.As(err, &ve) {
		t.Errorf("GetTopology of a document that is JSON but no topology: err = %v, want it to wrap a ValidationError", err)
	}

	// The placement guard cannot judge against garbage, so only force
	// replaces it.
	if _, err := s.ApplyTopology(ctx, parse(t, baseDoc), anyRev); err == nil {
		t.Fatal("unforced apply over an invalid document succeeded")
	}
	if rev := apply(t, s, baseDoc, store.ApplyOptions{ExpectedRevision: 4, Force: true}); rev != 5 {
		t.Fatalf("forced apply over an invalid document: revision %d, want 5", rev)
	}
	wantStored(t, s, 5, baseDoc)
}
