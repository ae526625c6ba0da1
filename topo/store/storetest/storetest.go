// Package storetest is the behavioural test suite of the topology service:
// every way of running a store.Store (embedded etcd in unit tests, a real
// etcd cluster in integration tests) should pass Run.
package storetest

import (
	"context"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"

	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
)

// Run runs the suite. newStore must return a Store on a cluster name no
// other call has used, so that subtests running in parallel do not share
// keys.
func Run(t *testing.T, newStore func(t *testing.T) *store.Store) {
	tests := []struct {
		name string
		// serial tests disturb the whole etcd (compaction), so they run
		// while no other subtest does.
		serial bool
		test   func(t *testing.T, s *store.Store)
	}{
		{name: "GetEmpty", test: testGetEmpty},
		{name: "ApplyAndGet", test: testApplyAndGet},
		{name: "CompareAndSwap", test: testCompareAndSwap},
		{name: "ConcurrentCompareAndSwap", test: testConcurrentCompareAndSwap},
		{name: "PlacementGuard", test: testPlacementGuard},
		{name: "UnrelatedChanges", test: testUnrelatedChanges},
		{name: "IdenticalApply", test: testIdenticalApply},
		{name: "InvalidStoredDocument", test: testInvalidStoredDocument},
		{name: "WatchInOrder", test: testWatchInOrder},
		{name: "WatchSkipsInvalidDocument", test: testWatchSkipsInvalidDocument},
		{name: "WatchStartsOnInvalidDocument", test: testWatchStartsOnInvalidDocument},
		{name: "WatchClose", test: testWatchClose},
		{name: "WatchSurvivesCompaction", serial: true, test: testWatchSurvivesCompaction},
		{name: "RecordChecks", test: testRecordChecks},
		{name: "RegisterListUpdateClose", test: testRegisterListUpdateClose},
		{name: "RecordOutlivesTTL", test: testRecordOutlivesTTL},
		{name: "RecordExpiresWithProcess", test: testRecordExpiresWithProcess},
		{name: "RegistrationReplacesLostLease", test: testRegistrationReplacesLostLease},
		{name: "WatchRecords", test: testWatchRecords},
		{name: "ShardStateUpdate", test: testShardStateUpdate},
		{name: "WatchShardStates", test: testWatchShardStates},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.serial {
				t.Parallel()
			}
			tc.test(t, newStore(t))
		})
	}
}

// timeout bounds each subtest, so a hung etcd fails it rather than the
// whole test binary.
const timeout = 30 * time.Second

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), timeout)
	t.Cleanup(cancel)
	return ctx
}

// baseDoc places store.public.customers on two shards split at 0x80....
const baseDoc = `{"authoritative_shard_group":"main","shard_groups":[{"uid":"main","key_ranges":[{"shard_uid":"shard-0"}]},{"uid":"customer_data","default_shard_index":"h","key_ranges":[{"shard_uid":"s1","end":"80"},{"shard_uid":"s2","start":"80"}]}],"shard_indexes":{"h":{"type":"xxhash","columns":["customer_id"]}},"databases":{"store":{"schemas":{"public":{"tables":{"customers":{"shard_group":"customer_data"}}}}}}}`

// resplitDoc moves the split of customers' group: a placement change.
var resplitDoc = strings.ReplaceAll(baseDoc, `"80"`, `"40"`)

// regroupDoc moves customers to the main group: a placement change.
var regroupDoc = strings.Replace(baseDoc, `"customers":{"shard_group":"customer_data"}`, `"customers":{"shard_group":"main"}`, 1)

// spareGroupDoc adds an unused shard group: no placement changes.
func spareGroupDoc(uid string) string {
	return strings.Replace(baseDoc, `"shard_groups":[`, `"shard_groups":[{"uid":"`+uid+`","key_ranges":[{"shard_uid":"`+uid+`-0"}]},`, 1)
}

// newDatabaseDoc adds a database without tables, whose tables resolve as
// any unlisted database's did: no placement changes.
var newDatabaseDoc = strings.Replace(baseDoc, `"databases":{`, `"databases":{"other":{"schemas":{"public":{}}},`, 1)

func parse(t *testing.T, doc string) *topo.Topology {
	t.Helper()
	tp, err := topo.Parse([]byte(doc))
	if err != nil {
		t.Fatalf("parsing test topology: %v", err)
	}
	return tp
}

// canonical returns t's canonical document, for comparing topologies.
func canonical(t *testing.T, tp *topo.Topology) string {
	t.Helper()
	b, err := tp.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func apply(t *testing.T, s *store.Store, doc string, opts store.ApplyOptions) int64 {
	t.Helper()
	rev, err := s.ApplyTopology(testContext(t), parse(t, doc), opts)
	if err != nil {
		t.Fatalf("ApplyTopology: %v", err)
	}
	return rev
}

// anyRev applies whatever revision is stored.
var anyRev = store.ApplyOptions{ExpectedRevision: store.AnyRevision}

// wantStored checks the stored topology's revision and document.
func wantStored(t *testing.T, s *store.Store, rev int64, doc string) {
	t.Helper()
	snap, err := s.GetTopology(testContext(t))
	if err != nil {
		t.Fatalf("GetTopology: %v", err)
	}
	if snap.Revision != rev {
		t.Errorf("stored revision = %d, want %d", snap.Revision, rev)
	}
	if got, want := canonical(t, snap.Topology), canonical(t, parse(t, doc)); got != want {
		t.Errorf("stored topology =\n%s\nwant\n%s", got, want)
	}
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// secondClient connects another client to s's etcd, standing for another
// process.
func secondClient(t *testing.T, s *store.Store) *clientv3.Client {
	t.Helper()
	cli, err := clientv3.New(clientv3.Config{Endpoints: s.Client().Endpoints(), DialTimeout: store.DialTimeout, Logger: zap.NewNop()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cli.Close() })
	return cli
}
