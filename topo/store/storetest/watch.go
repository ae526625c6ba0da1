package storetest

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tesseradb/tessera/topo/store"
)

// waitTime bounds waits for a watcher to see a change.
const waitTime = 10 * time.Second

func watch(t *testing.T, s *store.Store) *store.Watcher {
	t.Helper()
	w, err := s.WatchTopology(testContext(t))
	if err != nil {
		t.Fatalf("WatchTopology: %v", err)
	}
	t.Cleanup(w.Close)
	return w
}

// waitFor waits for the watcher to reach rev and checks its document.
func waitFor(t *testing.T, w *store.Watcher, rev int64, doc string) *store.Snapshot {
	t.Helper()
	snap, err := w.WaitForRevision(testContext(t), rev)
	if err != nil {
		t.Fatalf("WaitForRevision(%d): %v", rev, err)
	}
	if snap.Revision != rev {
		t.Fatalf("WaitForRevision(%d) returned revision %d", rev, snap.Revision)
	}
	if got, want := canonical(t, snap.Topology), canonical(t, parse(t, doc)); got != want {
		t.Fatalf("watched topology at %d =\n%s\nwant\n%s", rev, got, want)
	}
	return snap
}

func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

func nextProblem(t *testing.T, w *store.Watcher) error {
	t.Helper()
	select {
	case err, ok := <-w.Problems():
		if !ok {
			t.Fatal("Problems closed while the watcher should run")
		}
		return err
	case <-time.After(waitTime):
		t.Fatal("no problem reported")
		return nil
	}
}

func testWatchInOrder(t *testing.T, s *store.Store) {
	w := watch(t, s)
	if cur := w.Current(); cur != nil {
		t.Fatalf("Current before any topology = revision %d, want nil", cur.Revision)
	}

	// Follow the snapshots as a plan cache would: each time the one in
	// hand is superseded, take the current one.
	ctx := testContext(t)
	seen := make(chan []int64, 1)
	go func() {
		var revs []int64
		snap, err := w.WaitForRevision(ctx, 1)
		for err == nil {
			revs = append(revs, snap.Revision)
			if snap.Revision >= 3 {
				break
			}
			select {
			case <-snap.Superseded():
				snap = w.Current()
			case <-ctx.Done():
				err = ctx.Err()
			}
		}
		seen <- revs
	}()

	apply(t, s, baseDoc, store.ApplyOptions{})
	first := waitFor(t, w, 1, baseDoc)
	if closed(first.Superseded()) {
		t.Fatal("revision 1 superseded before any newer revision")
	}
	apply(t, s, spareGroupDoc("a"), anyRev)
	apply(t, s, spareGroupDoc("b"), anyRev)
	last := waitFor(t, w, 3, spareGroupDoc("b"))
	select {
	case <-first.Superseded():
	case <-time.After(waitTime):
		t.Fatal("revision 1 not superseded by revision 3")
	}
	if closed(last.Superseded()) {
		t.Error("the newest revision is superseded")
	}
	if cur := w.Current(); cur != last {
		t.Errorf("Current = revision %d, want the newest, 3", cur.Revision)
	}
	revs := <-seen
	for i := 1; i < len(revs); i++ {
		if revs[i] <= revs[i-1] {
			t.Fatalf("snapshots out of order: %v", revs)
		}
	}
	if len(revs) == 0 || revs[len(revs)-1] != 3 {
		t.Fatalf("snapshots seen %v, want them to end at 3", revs)
	}
}

func testWatchSkipsInvalidDocument(t *testing.T, s *store.Store) {
	apply(t, s, baseDoc, store.ApplyOptions{})
	w := watch(t, s)
	waitFor(t, w, 1, baseDoc)

	if _, err := s.Client().Put(testContext(t), s.TopologyKey(), "{garbage"); err != nil {
		t.Fatal(err)
	}
	var inv *store.InvalidTopologyError
	if err := nextProblem(t, w); !errors.As(err, &inv) || inv.Revision != 2 {
		t.Fatalf("problem = %v, want an InvalidTopologyError at revision 2", err)
	}
	if cur := w.Current(); cur == nil || cur.Revision != 1 {
		t.Fatalf("after an invalid document, Current = %v, want revision 1", cur)
	}

	apply(t, s, spareGroupDoc("spare"), store.ApplyOptions{ExpectedRevision: 2, Force: true})
	waitFor(t, w, 3, spareGroupDoc("spare"))
}

func testWatchStartsOnInvalidDocument(t *testing.T, s *store.Store) {
	if _, err := s.Client().Put(testContext(t), s.TopologyKey(), "[]"); err != nil {
		t.Fatal(err)
	}
	w := watch(t, s)
	if cur := w.Current(); cur != nil {
		t.Fatalf("Current on an invalid document = revision %d, want nil", cur.Revision)
	}
	var inv *store.InvalidTopologyError
	if err := nextProblem(t, w); !errors.As(err, &inv) {
		t.Fatalf("problem = %v, want an InvalidTopologyError", err)
	}
	apply(t, s, baseDoc, store.ApplyOptions{ExpectedRevision: 1, Force: true})
	waitFor(t, w, 2, baseDoc)
}

func testWatchClose(t *testing.T, s *store.Store) {
	apply(t, s, baseDoc, store.ApplyOptions{})
	w := watch(t, s)
	snap := waitFor(t, w, 1, baseDoc)
	w.Close()
	if _, err := w.WaitForRevision(testContext(t), 2); !errors.Is(err, store.ErrClosed) {
		t.Errorf("WaitForRevision after Close: err = %v, want ErrClosed", err)
	}
	for range w.Problems() {
		// Drain: the channel must be closed, or this never ends.
	}
	if w.Current() != snap {
		t.Error("Current changed at Close")
	}

	// Ending the context stops a watcher too.
	ctx, cancel := context.WithCancel(testContext(t))
	w2, err := s.WatchTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := w2.WaitForRevision(testContext(t), 2); !errors.Is(err, store.ErrClosed) {
		t.Errorf("WaitForRevision after the context ended: err = %v, want ErrClosed", err)
	}
}

func testWatchSurvivesCompaction(t *testing.T, s *store.Store) {
	ctx := testContext(t)
	w := watch(t, s)
	var rev int64
	for i := range 5 {
		rev = apply(t, s, spareGroupDoc(fmt.Sprintf("spare%d", i)), anyRev)
	}
	waitFor(t, w, rev, spareGroupDoc("spare4"))
	resp, err := s.Client().Get(ctx, s.TopologyKey())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Compact(ctx, resp.Header.Revision, clientv3.WithCompactPhysical()); err != nil {
		t.Fatalf("compacting: %v", err)
	}
	rev = apply(t, s, baseDoc, anyRev)
	waitFor(t, w, rev, baseDoc)
}
