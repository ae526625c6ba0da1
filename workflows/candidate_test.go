package workflows

import (
	"errors"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/topo/store"
)

func rep(id, zone string, received, replayed pgmanager.LSN) activities.InstanceView {
	return activities.InstanceView{
		Member: activities.Member{ID: id, Zone: zone}, Reachable: true, Serving: true,
		Role: store.RoleReplica, ReceiveLSN: received, ReplayLSN: replayed,
	}
}

func TestChooseCandidate(t *testing.T) {
	const mib = 1 << 20
	down := rep("z", "a", 900, 900)
	down.Reachable, down.Serving = false, false
	oldPrimary := activities.InstanceView{Member: activities.Member{ID: "p", Zone: "a"}, Reachable: true, Serving: true, Role: store.RolePrimary}
	tests := []struct {
		name      string
		instances []activities.InstanceView
		rules     candidateRules
		want      string
		ready     bool
		code      string // SQLSTATE of the refusal, if refused
	}{
		{name: "ready beats more received but unreplayed",
			instances: []activities.InstanceView{rep("b", "a", 100, 100), rep("c", "a", 100, 50)},
			want:      "b", ready: true},
		{name: "ready means replayed what any replica received",
			instances: []activities.InstanceView{rep("b", "a", 100, 100), rep("c", "a", 200, 150)},
			want:      "c", ready: false},
		{name: "most received when none is ready",
			instances: []activities.InstanceView{rep("b", "a", 150, 120), rep("c", "a", 200, 150), down},
			want:      "c"},
		{name: "synchronous standby among the ready",
			instances: []activities.InstanceView{rep("b", "a", 300, 300), rep("c", "b", 300, 300)},
			rules:     candidateRules{preferred: []string{"c"}},
			want:      "c", ready: true},
		{name: "synchronous standby among the lagging",
			instances: []activities.InstanceView{rep("b", "a", 300, 100), rep("c", "b", 250, 200)},
			rules:     candidateRules{preferred: []string{"c"}},
			want:      "c"},
		{name: "ties go to the lowest id",
			instances: []activities.InstanceView{rep("d", "a", 300, 300), rep("c", "a", 300, 300)},
			want:      "c", ready: true},
		{name: "the old primary, primaries and unreachable replicas are never candidates",
			instances: []activities.InstanceView{oldPrimary, down, rep("b", "a", 10, 10)},
			rules:     candidateRules{exclude: "p"},
			want:      "b", ready: true},
		{name: "lag bound",
			instances: []activities.InstanceView{rep("b", "a", 40*mib, 1*mib), rep("c", "a", 20*mib, 18*mib)},
			want:      "c"},
		{name: "nothing within the lag bound",
			instances: []activities.InstanceView{rep("b", "a", 40*mib, 1*mib)},
			code:      "55000"},
		{name: "force ignores the lag bound",
			instances: []activities.InstanceView{rep("b", "a", 40*mib, 1*mib)},
			rules:     candidateRules{force: true},
			want:      "b"},
		{name: "no replica",
			instances: []activities.InstanceView{oldPrimary, down},
			rules:     candidateRules{exclude: "p"},
			code:      "55000"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := tt.rules
			if r.maxLag == 0 {
				r.maxLag = DefaultMaxLagBytes
			}
			got, err := chooseCandidate(activities.ShardView{State: store.ShardState{Shard: "s"}, Instances: tt.instances}, r)
			if tt.code != "" {
				var appErr *temporal.ApplicationError
				if !errors.As(err, &appErr) || appErr.Type() != tt.code || !appErr.NonRetryable() {
					t.Fatalf("got %+v, %v; want a non-retryable %s refusal", got, err, tt.code)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.ID != tt.want || got.ready != tt.ready {
				t.Errorf("chose %s (ready %v), want %s (ready %v)", got.ID, got.ready, tt.want, tt.ready)
			}
		})
	}
}
