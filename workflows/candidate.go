package workflows

import (
	"cmp"
	"slices"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/store"
)

// DefaultMaxLagBytes bounds how much received WAL a replica may still have
// to replay to be promoted without Force: replaying it delays the new
// primary, and so much lag says the replica is unwell.
const DefaultMaxLagBytes = 16 << 20

// candidateRules say which replica may replace a primary.
type candidateRules struct {
	// exclude is the primary being replaced.
	exclude string
	// preferred are the policy's synchronous standbys: they confirmed
	// every commit the primary acknowledged.
	preferred []string
	maxLag    uint64
	force     bool
}

// candidate is the replica chosen, and why.
type candidate struct {
	activities.InstanceView
	// ready: it has replayed all WAL any reachable replica received, so
	// promoting it loses nothing that any replica has and is quick.
	ready bool
}

// chooseCandidate picks the replica to promote among the serving
// replicas of view: ready ones first, then the policy's synchronous
// standbys, then the one holding the most WAL, then the most replayed,
// then by id so that the choice is deterministic. A replica with more
// than maxLag bytes received but not replayed is passed over unless
// force.
func chooseCandidate(view activities.ShardView, r candidateRules) (candidate, error) {
	var replicas []activities.InstanceView
	for _, in := range view.Instances {
		if in.ID != r.exclude && in.Reachable && in.Serving && in.Role == store.RoleReplica {
			replicas = append(replicas, in)
		}
	}
	if len(replicas) == 0 {
		return candidate{}, activities.Refuse(pgerr.ObjectNotInPrerequisiteState, "shard %s has no serving replica to promote", view.State.Shard)
	}
	var target uint64
	for _, in := range replicas {
		target = max(target, uint64(in.Held()))
	}
	var eligible []candidate
	for _, in := range replicas {
		if in.LagBytes() <= r.maxLag || r.force {
			eligible = append(eligible, candidate{InstanceView: in, ready: uint64(in.ReplayLSN) >= target})
		}
	}
	if len(eligible) == 0 {
		return candidate{}, activities.Refuse(pgerr.ObjectNotInPrerequisiteState,
			"every serving replica of shard %s has more than %d bytes of WAL to replay; Force promotes one anyway", view.State.Shard, r.maxLag)
	}
	best := slices.MinFunc(eligible, func(a, b candidate) int {
		return cmp.Or(
			-cmpBool(a.ready, b.ready),
			-cmpBool(slices.Contains(r.preferred, a.ID), slices.Contains(r.preferred, b.ID)),
			-cmp.Compare(a.Held(), b.Held()),
			-cmp.Compare(a.ReplayLSN, b.ReplayLSN),
			cmp.Compare(a.ID, b.ID),
		)
	})
	return best, nil
}

func cmpBool(a, b bool) int {
	switch {
	case a == b:
		return 0
	case a:
		return 1
	}
	return -1
}
