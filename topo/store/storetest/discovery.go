package storetest

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tesseradb/tessera/topo/store"
)

// ttl is the lease TTL of test registrations: the shortest etcd grants, so
// expiry tests are quick.
const ttl = time.Second

// expiryTime bounds how long a dead process's record may linger: its TTL,
// etcd raising the TTL to its minimum, and etcd's expiry sweep.
const expiryTime = ttl + 5*time.Second

func sidecar(id, role string) store.Record {
	return store.Record{
		Kind: store.KindSidecar, ID: id, ShardUID: "shard-0", InstanceID: "instance-" + id, Role: role,
		Zone: "zone-a", PostgresAddr: "10.0.0.1:5432", GRPCAddr: "10.0.0.1:7000",
	}
}

func router(id string) store.Record {
	return store.Record{Kind: store.KindRouter, ID: id, Addr: "10.0.0.2:5432", GRPCAddr: "10.0.0.2:7000"}
}

func register(t *testing.T, s *store.Store, rec store.Record) *store.Registration {
	t.Helper()
	reg, err := s.Register(testContext(t), rec, ttl)
	if err != nil {
		t.Fatalf("Register: %v", err)
	}
	t.Cleanup(func() {
		// t.Context has ended by now.
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		defer cancel()
		reg.Close(ctx)
	})
	return reg
}

func list(t *testing.T, s *store.Store, kind store.Kind) []store.Record {
	t.Helper()
	recs, err := s.ListRecords(testContext(t), kind)
	if err != nil {
		t.Fatalf("ListRecords(%s): %v", kind, err)
	}
	return recs
}

func ids(recs []store.Record) []string {
	out := []string{}
	for _, r := range recs {
		out = append(out, r.ID)
	}
	return out
}

func listed(t *testing.T, s *store.Store, kind store.Kind, id string) bool {
	t.Helper()
	return slices.Contains(ids(list(t, s, kind)), id)
}

func testRecordChecks(t *testing.T, s *store.Store) {
	bad := map[string]store.Record{
		"unknown kind":             {Kind: "proxy", ID: "p1"},
		"empty id":                 {Kind: store.KindRouter},
		"id with slash":            {Kind: store.KindRouter, ID: "a/b"},
		"sidecar without shard":    {Kind: store.KindSidecar, ID: "s1", InstanceID: "i1", Role: store.RolePrimary},
		"sidecar without instance": {Kind: store.KindSidecar, ID: "s1", ShardUID: "shard-0", Role: store.RolePrimary},
		"sidecar without role":     sidecar("s1", ""),
		"sidecar with other role":  sidecar("s1", "leader"),
		"replicator without shard": {Kind: store.KindReplicator, ID: "rep1"},
	}
	for name, rec := range bad {
		if rec.Check() == nil {
			t.Errorf("%s: Check accepted %+v", name, rec)
		}
		if reg, err := s.Register(testContext(t), rec, ttl); err == nil {
			reg.Close(testContext(t))
			t.Errorf("%s: Register accepted %+v", name, rec)
		}
	}
	for _, rec := range []store.Record{sidecar("s1", store.RolePrimary), sidecar("s2", store.RoleReplica), router("r1"), {Kind: store.KindWorker, ID: "w1"},
		{Kind: store.KindReplicator, ID: "rep1", ShardUID: "shard-0"}} {
		if err := rec.Check(); err != nil {
			t.Errorf("Check(%+v): %v", rec, err)
		}
	}
	if _, err := s.ListRecords(testContext(t), "proxy"); err == nil {
		t.Error("ListRecords of an unknown kind succeeded")
	}
	if _, err := s.WatchRecords(testContext(t), "proxy"); err == nil {
		t.Error("WatchRecords of an unknown kind succeeded")
	}
}

func testRegisterListUpdateClose(t *testing.T, s *store.Store) {
	ctx := testContext(t)
	want := sidecar("pg-1", store.RolePrimary)
	before := time.Now()
	reg := register(t, s, want)
	register(t, s, router("r1"))

	got := list(t, s, store.KindSidecar)
	if len(got) != 1 {
		t.Fatalf("sidecars = %+v, want one", got)
	}
	started := got[0].Started
	if started.Before(before.Add(-time.Second)) || started.After(time.Now().Add(time.Second)) {
		t.Errorf("Started = %v, want about now", started)
	}
	want.Started = started
	if got[0] != want {
		t.Errorf("sidecar record = %+v, want %+v", got[0], want)
	}
	if r := list(t, s, store.KindRouter); len(r) != 1 || r[0].ID != "r1" {
		t.Errorf("routers = %+v, want r1 alone", r)
	}
	if w := list(t, s, store.KindWorker); len(w) != 0 {
		t.Errorf("workers = %+v, want none", w)
	}

	moved := sidecar("pg-1", store.RoleReplica)
	if err := reg.Update(ctx, moved); err != nil {
		t.Fatalf("Update: %v", err)
	}
	moved.Started = started
	if got := list(t, s, store.KindSidecar); len(got) != 1 || got[0] != moved {
		t.Errorf("after Update, sidecars = %+v, want %+v", got, moved)
	}
	if err := reg.Update(ctx, sidecar("pg-2", store.RoleReplica)); err == nil {
		t.Error("Update changed the record's id")
	}
	if err := reg.Update(ctx, router("pg-1")); err == nil {
		t.Error("Update changed the record's kind")
	}

	if err := reg.Close(ctx); err != nil {
		t.Fatalf("Close: %v", err)
	}
	if got := list(t, s, store.KindSidecar); len(got) != 0 {
		t.Errorf("after Close, sidecars = %+v, want none", got)
	}
	if err := reg.Update(ctx, moved); !errors.Is(err, store.ErrClosed) {
		t.Errorf("Update after Close: err = %v, want ErrClosed", err)
	}
	if err := reg.Close(ctx); err != nil {
		t.Errorf("second Close: %v", err)
	}
}

func testRecordOutlivesTTL(t *testing.T, s *store.Store) {
	register(t, s, router("r1"))
	time.Sleep(3 * ttl)
	if !listed(t, s, store.KindRouter, "r1") {
		t.Fatal("a live process's record expired")
	}
}

func testRecordExpiresWithProcess(t *testing.T, s *store.Store) {
	cli := secondClient(t, s)
	other := store.New(cli, s.Cluster())
	if _, err := other.Register(testContext(t), router("doomed"), ttl); err != nil {
		t.Fatalf("Register: %v", err)
	}
	if !listed(t, s, store.KindRouter, "doomed") {
		t.Fatal("registered record not listed")
	}
	// The process dies: its connection closes without revoking the lease.
	cli.Close()
	eventually(t, expiryTime, "the dead process's record is still listed", func() bool {
		return !listed(t, s, store.KindRouter, "doomed")
	})
}

func testRegistrationReplacesLostLease(t *testing.T, s *store.Store) {
	ctx := testContext(t)
	register(t, s, router("r1"))
	key := s.RecordKey(store.KindRouter, "r1")
	resp, err := s.Client().Get(ctx, key)
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("reading %s: %v, %d keys", key, err, len(resp.Kvs))
	}
	lost := clientv3.LeaseID(resp.Kvs[0].Lease)
	// Revoking stands for etcd expiring the lease during a partition.
	if _, err := s.Client().Revoke(ctx, lost); err != nil {
		t.Fatal(err)
	}
	eventually(t, waitTime, "the record did not come back under a new lease", func() bool {
		resp, err := s.Client().Get(ctx, key)
		return err == nil && len(resp.Kvs) == 1 && clientv3.LeaseID(resp.Kvs[0].Lease) != lost
	})
	time.Sleep(2 * ttl)
	if !listed(t, s, store.KindRouter, "r1") {
		t.Fatal("the record under the new lease expired")
	}
}

func testWatchRecords(t *testing.T, s *store.Store) {
	ctx := testContext(t)
	register(t, s, router("r1"))
	watchCtx, cancel := context.WithCancel(ctx)
	ch, err := s.WatchRecords(watchCtx, store.KindRouter)
	if err != nil {
		t.Fatal(err)
	}
	// Each list is the whole state, so waiting for the wanted one is right
	// even if etcd hiccups and a list is sent twice.
	await := func(want ...string) {
		t.Helper()
		timer := time.NewTimer(waitTime)
		defer timer.Stop()
		var last []string
		for {
			select {
			case recs, ok := <-ch:
				if !ok {
					t.Fatal("WatchRecords channel closed")
				}
				if last = ids(recs); slices.Equal(last, want) {
					return
				}
			case <-timer.C:
				t.Fatalf("routers watched = %v, want %v", last, want)
			}
		}
	}
	select {
	case recs := <-ch:
		if !slices.Equal(ids(recs), []string{"r1"}) {
			t.Fatalf("first list = %v, want the initial [r1]", ids(recs))
		}
	case <-time.After(waitTime):
		t.Fatal("no initial list")
	}
	r0 := register(t, s, router("r0"))
	register(t, s, sidecar("pg-1", store.RolePrimary))
	await("r0", "r1")
	if err := r0.Close(ctx); err != nil {
		t.Fatal(err)
	}
	await("r1")

	cancel()
	for range ch {
		// Drain: the channel must close when the context ends.
	}
}
