package admin

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/tesseradb/tessera/topo/store"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

var policy = Policy{DetectWindow: 1500 * time.Millisecond, Grace: 5 * time.Second}

// ago returns t0 minus d.
func ago(d time.Duration) time.Time { return t0.Add(-d) }

// up is a registered instance, reachable and serving for a minute.
func up(id, role, zone string) Instance {
	return Instance{ID: id, Zone: zone, Role: role, Registered: true, Reachable: true, Serving: true, Since: ago(time.Minute)}
}

// withRepl gives a primary a replication status taken just now.
func withRepl(in Instance, names string, streaming ...string) Instance {
	in.Replication = &Replication{At: t0, SynchronousStandbyNames: names, Streaming: streaming}
	return in
}

func state(primary string, d store.Durability) *store.ShardState {
	return &store.ShardState{Shard: "s", Primary: primary, Term: 1, Durability: d}
}

// healthy is a shard with a recorded primary a, a streaming replica b and
// sync durability in force.
func healthy() Shard {
	return Shard{UID: "s", State: state("a", ""), Instances: []Instance{
		withRepl(up("a", "primary", "z1"), `ANY 1 ("b")`, "b"),
		up("b", "replica", "z2"),
	}}
}

// edit returns healthy() changed by f.
func edit(f func(*Shard)) Shard {
	sh := healthy()
	f(&sh)
	return sh
}

func down(in Instance, reachable bool, d time.Duration) Instance {
	in.Reachable, in.Serving, in.Since = reachable, false, ago(d)
	return in
}

func TestDecide(t *testing.T) {
	failover := func(reason string) []Action {
		return []Action{{Kind: ActFailover, Shard: "s", Reason: reason}}
	}
	repair := func(reason string) []Action { return []Action{{Kind: ActRepair, Shard: "s", Reason: reason}} }
	cases := []struct {
		name  string
		shard Shard
		want  []Action
	}{
		{"healthy shard: nothing", healthy(), nil},
		{"primary unreachable for less than the window: wait",
			edit(func(sh *Shard) { sh.Instances[0] = down(sh.Instances[0], false, 1400*time.Millisecond) }), nil},
		{"primary unreachable for the window: failover",
			edit(func(sh *Shard) { sh.Instances[0] = down(sh.Instances[0], false, 1500*time.Millisecond) }),
			failover("primary a is unreachable for 1.5s")},
		{"primary reachable but not serving: failover",
			edit(func(sh *Shard) { sh.Instances[0] = down(sh.Instances[0], true, 2*time.Second) }),
			failover("primary a is not serving for 2s")},
		{"recorded primary without a discovery record: failover",
			edit(func(sh *Shard) { sh.Instances[0] = Instance{ID: "a", Since: ago(3 * time.Second)} }),
			failover("primary a has no discovery record for 3s")},
		{"recorded primary never listed: nothing can be timed",
			edit(func(sh *Shard) { sh.Instances = sh.Instances[1:] }), nil},
		{"dead primary while routers buffer (switchover): left alone",
			edit(func(sh *Shard) {
				sh.State.Buffer = &store.BufferSignal{Reason: "switchover", Until: t0.Add(time.Second)}
				sh.Instances[0] = down(sh.Instances[0], false, time.Minute)
			}), nil},
		{"dead primary after the buffer signal expired: failover",
			edit(func(sh *Shard) {
				sh.State.Buffer = &store.BufferSignal{Reason: "switchover", Until: t0}
				sh.Instances[0] = down(sh.Instances[0], false, time.Minute)
			}), failover("primary a is unreachable for 1m0s")},
		{"a dead replica is not failed over",
			edit(func(sh *Shard) { sh.Instances[1] = down(sh.Instances[1], false, time.Minute) }), nil},
		{"old primary back as primary: rejoin, and no repair meanwhile",
			edit(func(sh *Shard) {
				sh.State.Primary = "b"
				sh.Instances[0] = withRepl(up("a", "primary", "z1"), "", "")
				sh.Instances[1] = withRepl(up("b", "primary", "z2"), "")
			}),
			[]Action{{Kind: ActRejoin, Shard: "s", Instance: "a", Reason: "a reports primary but the recorded primary is b"}}},
		{"old primary reporting primary but unreachable: nothing",
			edit(func(sh *Shard) {
				sh.State.Primary = "b"
				sh.Instances[0] = down(up("a", "primary", "z1"), false, time.Minute)
				sh.Instances[1] = withRepl(up("b", "primary", "z2"), `ANY 1 ("a")`)
			}), nil},
		{"no state stored, one primary up past the grace: repair",
			edit(func(sh *Shard) { sh.State = nil }), repair("no shard state is stored")},
		{"no state stored, primary up within the grace: wait",
			edit(func(sh *Shard) { sh.State = nil; sh.Instances[0].Since = ago(time.Second) }), nil},
		{"no state stored and two instances report primary: repair at once",
			edit(func(sh *Shard) { sh.State = nil; sh.Instances[1].Role = "primary" }),
			repair("no primary is recorded and 2 instances report primary [a b]")},
		{"no state stored and no instance reports primary: repair",
			edit(func(sh *Shard) { sh.State = nil; sh.Instances = sh.Instances[1:] }),
			repair("no primary is recorded and 0 instances report primary []")},
		{"no state stored, the reported primary dies: failover",
			edit(func(sh *Shard) { sh.State = nil; sh.Instances[0] = down(sh.Instances[0], false, 2*time.Second) }),
			failover("primary a is unreachable for 2s")},
		{"a deregistered instance reporting primary is not the primary",
			edit(func(sh *Shard) {
				sh.State = nil
				sh.Instances = append(sh.Instances, Instance{ID: "c", Role: "primary", Since: ago(time.Minute)})
			}), repair("no shard state is stored")},
		{"replica up past the grace but not streaming: repair",
			edit(func(sh *Shard) { sh.Instances[0].Replication.Streaming = nil }),
			repair("replica b is not streaming from primary a")},
		{"replica up within the grace of the status: wait",
			edit(func(sh *Shard) {
				sh.Instances[0].Replication.Streaming = nil
				sh.Instances[1].Since = ago(4 * time.Second)
			}), nil},
		{"replica down: not expected to stream",
			edit(func(sh *Shard) {
				sh.Instances[0].Replication.Streaming = nil
				sh.Instances[1] = down(sh.Instances[1], false, time.Minute)
			}), nil},
		{"primary up within the grace: no repair yet",
			edit(func(sh *Shard) { sh.Instances[0].Since = ago(time.Second); sh.Instances[0].Replication.Streaming = nil }), nil},
		{"replication status from before the primary came up: ignored",
			edit(func(sh *Shard) {
				sh.Instances[0].Replication.Streaming = nil
				sh.Instances[0].Replication.At = ago(2 * time.Minute)
			}), nil},
		{"no replication status yet: only the state is checked",
			edit(func(sh *Shard) { sh.Instances[0].Replication = nil }), nil},
		{"async policy with standbys set: repair",
			edit(func(sh *Shard) { sh.State.Durability = store.DurabilityAsync }),
			repair(`synchronous_standby_names is "ANY 1 (\"b\")", durability async wants ""`)},
		{"sync policy without standbys: repair",
			edit(func(sh *Shard) { sh.Instances[0].Replication.SynchronousStandbyNames = "" }),
			repair(`synchronous_standby_names is "", durability sync wants "ANY 1 (\"b\")"`)},
		{"cross-zone sync counts only other zones",
			edit(func(sh *Shard) {
				sh.State.Durability = store.DurabilityCrossZoneSync
				sh.Instances = append(sh.Instances, up("c", "replica", "z1"))
				sh.Instances[0].Replication.Streaming = []string{"b", "c"}
			}), nil},
		{"cross-zone sync naming a same-zone replica: repair",
			edit(func(sh *Shard) {
				sh.State.Durability = store.DurabilityCrossZoneSync
				sh.Instances = append(sh.Instances, up("c", "replica", "z1"))
				sh.Instances[0].Replication.Streaming = []string{"b", "c"}
				sh.Instances[0].Replication.SynchronousStandbyNames = `ANY 1 ("b", "c")`
			}), repair(`synchronous_standby_names is "ANY 1 (\"b\", \"c\")", durability cross_zone_sync wants "ANY 1 (\"b\")"`)},
		{"several problems: one repair naming them all",
			edit(func(sh *Shard) {
				sh.Instances[0].Replication.Streaming = nil
				sh.Instances[0].Replication.SynchronousStandbyNames = ""
			}), repair(`replica b is not streaming from primary a; synchronous_standby_names is "", durability sync wants "ANY 1 (\"b\")"`)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Decide(t0, []Shard{c.shard}, policy)
			if !reflect.DeepEqual(got, c.want) {
				t.Errorf("Decide:\n got %+v\nwant %+v", got, c.want)
			}
		})
	}
}

// TestDecideShards: shards are decided independently, in order.
func TestDecideShards(t *testing.T) {
	dead := edit(func(sh *Shard) { sh.UID = "a-shard"; sh.Instances[0] = down(sh.Instances[0], false, time.Minute) })
	fresh := edit(func(sh *Shard) { sh.UID = "b-shard"; sh.State = nil })
	got := Decide(t0, []Shard{dead, healthy(), fresh}, policy)
	if len(got) != 2 || got[0].Kind != ActFailover || got[0].Shard != "a-shard" || got[1].Kind != ActRepair || got[1].Shard != "b-shard" {
		t.Fatalf("Decide = %+v", got)
	}
	if !strings.Contains(got[0].Reason, "unreachable") {
		t.Errorf("reason %q", got[0].Reason)
	}
}
