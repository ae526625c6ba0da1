package admin

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/topo/store"
)

// Instance is what the monitor last saw of one Postgres instance.
type Instance struct {
	ID   string
	Zone string
	// Role is the role the instance reported last (its discovery
	// record's until its first health message). A sidecar keeps
	// reporting the last known role while its Postgres is down.
	Role string
	// Registered: the instance has a discovery record.
	Registered bool
	// Reachable: its Health stream is open and not stale.
	Reachable bool
	// Serving: its last health message said Postgres answers.
	Serving bool
	// Since is when Up last changed: the start of the current spell of
	// being up, or of being down.
	Since time.Time
	// Replication is the instance's last replication status while it
	// reported primary, nil when none was taken.
	Replication *Replication
}

// Up reports whether the instance is reachable and serving.
func (i Instance) Up() bool { return i.Reachable && i.Serving }

// Replication is a primary's own view of its replication, from its
// sidecar's Status.
type Replication struct {
	// At is when the status was taken.
	At                      time.Time
	SynchronousStandbyNames string
	// Streaming lists the application names (instance ids) of the
	// replicas streaming from the primary.
	Streaming []string
}

// Shard is everything observed of one shard.
type Shard struct {
	UID string
	// State is the stored ShardState, nil when none is stored.
	State *store.ShardState
	// Instances are the shard's instances. The instance State.Primary
	// names is always among them, registered or not, so that a primary
	// whose sidecar vanished is seen as down.
	Instances []Instance
}

// Policy holds the thresholds of Decide.
type Policy struct {
	// DetectWindow is how long a primary must be continuously down
	// before it is failed over. pgmanager restarts a crashed Postgres
	// within about a second; a primary back within the window is kept.
	DetectWindow time.Duration
	// Grace is how long a primary and a replica must have been up
	// before the replica's absence from the primary's replication
	// counts: a replica that has just started or been repointed needs
	// a moment to connect.
	Grace time.Duration
}

// ActionKind is the workflow an Action starts.
type ActionKind string

// The actions the leader takes.
const (
	ActFailover ActionKind = "failover"
	ActRejoin   ActionKind = "rejoin"
	ActRepair   ActionKind = "repair"
)

// Action is one workflow to start. Instance is set for rejoins only.
type Action struct {
	Kind     ActionKind
	Shard    string
	Instance string
	Reason   string
}

// Decide returns what the recovery leader should start, given what was
// observed at now. It is a pure function: the same observations always
// give the same actions, in shard order. The caller throttles repeats.
//
// Per shard, in order of precedence:
//   - a shard whose state asks routers to buffer is left alone: a
//     switchover or cutover is moving it;
//   - a primary down for DetectWindow is failed over, and nothing else
//     is done to the shard meanwhile;
//   - an instance that reports itself primary but is not the recorded
//     primary (an old primary that came back) is rejoined;
//   - otherwise, once the primary has been up for Grace, the shard is
//     repaired when no state is stored, when a replica that has been
//     up for Grace is not streaming from the primary, or when
//     synchronous_standby_names disagrees with the durability policy.
//
// The primary is State.Primary; with no primary recorded, it is the one
// instance that reports itself primary (several, or none, is a repair).
func Decide(now time.Time, shards []Shard, p Policy) []Action {
	var out []Action
	for _, sh := range shards {
		out = append(out, decideShard(now, sh, p)...)
	}
	return out
}

func decideShard(now time.Time, sh Shard, p Policy) []Action {
	st := sh.State
	if st != nil && st.Buffering(now) {
		return nil
	}
	recorded := st != nil && st.Primary != ""
	var primary *Instance
	if recorded {
		primary = find(sh.Instances, st.Primary)
	} else {
		var reporting []string
		for i := range sh.Instances {
			if in := &sh.Instances[i]; in.Role == store.RolePrimary && in.Registered {
				primary = in
				reporting = append(reporting, in.ID)
			}
		}
		if len(reporting) != 1 {
			return []Action{{Kind: ActRepair, Shard: sh.UID,
				Reason: fmt.Sprintf("no primary is recorded and %d instances report primary %v", len(reporting), reporting)}}
		}
	}
	if primary == nil {
		// The caller always lists the recorded primary; without it the
		// length of its absence is unknown, so nothing is decided.
		return nil
	}
	if !primary.Up() {
		if down := now.Sub(primary.Since); down >= p.DetectWindow {
			return []Action{{Kind: ActFailover, Shard: sh.UID,
				Reason: fmt.Sprintf("primary %s %s for %s", primary.ID, downReason(*primary), down.Round(time.Millisecond))}}
		}
		return nil
	}

	var out []Action
	if recorded {
		for _, in := range sh.Instances {
			if in.ID != primary.ID && in.Role == store.RolePrimary && in.Reachable {
				out = append(out, Action{Kind: ActRejoin, Shard: sh.UID, Instance: in.ID,
					Reason: fmt.Sprintf("%s reports primary but the recorded primary is %s", in.ID, primary.ID)})
			}
		}
	}
	if len(out) > 0 || now.Sub(primary.Since) < p.Grace {
		return out
	}
	if reasons := repairReasons(sh, *primary, p); len(reasons) > 0 {
		out = append(out, Action{Kind: ActRepair, Shard: sh.UID, Reason: strings.Join(reasons, "; ")})
	}
	return out
}

// repairReasons lists what is wrong with a shard whose primary is up.
func repairReasons(sh Shard, primary Instance, p Policy) []string {
	var reasons []string
	if sh.State == nil || sh.State.Primary == "" {
		reasons = append(reasons, "no shard state is stored")
	}
	rep := primary.Replication
	if rep == nil || rep.At.Before(primary.Since) {
		// Nothing known of this primary's replication yet.
		return reasons
	}
	var members []activities.Member
	for _, in := range sh.Instances {
		if !in.Registered {
			continue
		}
		members = append(members, activities.Member{ID: in.ID, Zone: in.Zone})
		if in.ID != primary.ID && in.Role == store.RoleReplica && in.Up() && rep.At.Sub(in.Since) >= p.Grace &&
			!slices.Contains(rep.Streaming, in.ID) {
			reasons = append(reasons, fmt.Sprintf("replica %s is not streaming from primary %s", in.ID, primary.ID))
		}
	}
	if sh.State != nil {
		// The same function the durability workflow sets the value
		// with, so that the two never disagree about spelling.
		policy := sh.State.Durability.OrDefault()
		want := activities.SynchronousStandbyNames(policy, primary.ID, members)
		if rep.SynchronousStandbyNames != want {
			reasons = append(reasons, fmt.Sprintf("synchronous_standby_names is %q, durability %s wants %q",
				rep.SynchronousStandbyNames, policy, want))
		}
	}
	return reasons
}

func downReason(in Instance) string {
	switch {
	case !in.Registered:
		return "has no discovery record"
	case !in.Reachable:
		return "is unreachable"
	}
	return "is not serving"
}

func find(list []Instance, id string) *Instance {
	for i := range list {
		if list[i].ID == id {
			return &list[i]
		}
	}
	return nil
}
