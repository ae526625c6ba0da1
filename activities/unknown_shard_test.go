package activities_test

import (
	"testing"
	"time"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/topo/store"
)

// TestUnknownShardCreatesNoState: every activity that writes a shard's
// state, and the inspection every operation starts with, refuses a shard
// the cluster does not have (42704) and stores nothing for it. Before,
// StoreDurability created a state for a typo, which admins then tried to
// repair every 10 s.
func TestUnknownShardCreatesNoState(t *testing.T) {
	const typo = "s1-typo"
	for name, run := range map[string]func() error{
		"InspectShard": func() error { _, err := call[activities.ShardView](t, acts.InspectShard, typo); return err },
		"StoreDurability": func() error {
			_, err := call[store.ShardState](t, acts.StoreDurability, activities.PolicyInput{Shard: typo, Policy: store.DurabilityAsync})
			return err
		},
		"SetBuffer": func() error {
			_, err := call[time.Time](t, acts.SetBuffer, activities.BufferInput{Shard: typo, Reason: "test", For: time.Second})
			return err
		},
		"PublishPrimary": func() error {
			_, err := call[store.ShardState](t, acts.PublishPrimary, activities.PublishInput{Shard: typo, Primary: "s1-a"})
			return err
		},
	} {
		if err := run(); code(err) != "42704" {
			t.Errorf("%s on an unknown shard: %v; want 42704", name, err)
		}
	}
	if s, err := st.GetShardState(testCtx(t), typo); err != nil || s.Revision != 0 {
		t.Errorf("a state was stored for the unknown shard: %+v, %v", s, err)
	}
	// The real shard still takes them.
	if _, err := call[store.ShardState](t, acts.StoreDurability, activities.PolicyInput{Shard: shard, Policy: store.DurabilitySync}); err != nil {
		t.Errorf("StoreDurability on %s: %v", shard, err)
	}
}
