package activities_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/topo/store"
)

func TestSynchronousStandbyNames(t *testing.T) {
	members := []activities.Member{{ID: "p", Zone: "z1"}, {ID: "r2", Zone: "z2"}, {ID: "r1", Zone: "z1"}, {ID: "r3", Zone: "z3"}, {ID: "r0"}}
	tests := []struct {
		policy  store.Durability
		primary string
		members []activities.Member
		want    string
	}{
		{"", "p", members, `ANY 1 ("r0", "r1", "r2", "r3")`},
		{store.DurabilitySync, "p", members, `ANY 1 ("r0", "r1", "r2", "r3")`},
		{store.DurabilityAsync, "p", members, ``},
		{store.DurabilityCrossZoneSync, "p", members, `ANY 1 ("r2", "r3")`},
		{store.DurabilityCrossZoneSync, "r2", members, `ANY 1 ("p", "r1", "r3")`},
		// A primary of unknown zone has no "other zone".
		{store.DurabilityCrossZoneSync, "r0", members, ``},
		{store.DurabilityCrossZoneSync, "p", members[:3:3][:1], ``},
		{store.DurabilitySync, "p", members[:1], ``},
	}
	for _, tt := range tests {
		if got := activities.SynchronousStandbyNames(tt.policy, tt.primary, tt.members); got != tt.want {
			t.Errorf("%q on %s: got %q, want %q", tt.policy, tt.primary, got, tt.want)
		}
	}
}

// TestApplyDurability applies cross_zone_sync and sync to the real
// primary and checks that commits are confirmed by the standby chosen.
func TestApplyDurability(t *testing.T) {
	primary := currentPrimary(t)
	streamingFrom(t, primary)
	t.Cleanup(func() {
		must[store.ShardState](t, acts.StoreDurability, activities.PolicyInput{Shard: shard, Policy: store.DurabilitySync})
		must[string](t, acts.ApplyDurability, activities.DurabilityInput{Shard: shard})
	})
	members := inspect(t).Members()
	for _, policy := range []store.Durability{store.DurabilityCrossZoneSync, store.DurabilityAsync, store.DurabilitySync} {
		must[store.ShardState](t, acts.StoreDurability, activities.PolicyInput{Shard: shard, Policy: policy})
		names := must[string](t, acts.ApplyDurability, activities.DurabilityInput{Shard: shard, Primary: primary})
		want := activities.SynchronousStandbyNames(policy, primary, members)
		if names != want {
			t.Errorf("%s: applied %q, want %q", policy, names, want)
		}
		if policy == store.DurabilityCrossZoneSync && (names == "" || names == activities.SynchronousStandbyNames(store.DurabilitySync, primary, members)) {
			t.Errorf("cross_zone_sync on %s gave %q: the test cluster's zones should make it differ from sync", primary, names)
		}
		if got, _ := query(t, primary, "SHOW synchronous_standby_names"); got != names {
			t.Errorf("%s: synchronous_standby_names = %q, want %q", policy, got, names)
		}
		exec(t, primary, "CREATE TABLE IF NOT EXISTS durable (policy text)")
		exec(t, primary, fmt.Sprintf("INSERT INTO durable VALUES ('%s')", policy))
		// The commit above returned, so a standby confirmed it; the
		// primary names exactly the policy's standbys as its quorum.
		want = strings.Join(activities.SyncStandbys(policy, primary, members), ",")
		eventually(t, 10*time.Second, "the quorum standbys", func() error {
			got, err := query(t, primary, "SELECT COALESCE(string_agg(application_name, ',' ORDER BY application_name), '') FROM pg_stat_replication WHERE sync_state = 'quorum'")
			if err != nil || got != want {
				return fmt.Errorf("quorum standbys %q, want %q (%v)", got, want, err)
			}
			return nil
		})
	}
	if _, err := call[store.ShardState](t, acts.StoreDurability, activities.PolicyInput{Shard: shard, Policy: "quorum"}); code(err) != "22023" {
		t.Errorf("unknown policy: %v", err)
	}
}
