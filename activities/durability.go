package activities

import (
	"context"
	"slices"
	"strings"

	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store"
)

// SyncStandbys returns, sorted, the instances that policy makes the
// synchronous standbys of primary among a shard's members: with sync
// every other member, with cross_zone_sync those in another zone than the
// primary's, with async none. Every registered replica counts, reachable
// or not, so that a replica that is down for a moment does not silently
// weaken the policy; ANY 1 lets whichever is up confirm commits.
func SyncStandbys(policy store.Durability, primary string, members []Member) []string {
	zone, known := "", false
	for _, m := range members {
		if m.ID == primary {
			zone, known = m.Zone, true
		}
	}
	var out []string
	for _, m := range members {
		if m.ID == primary {
			continue
		}
		switch policy.OrDefault() {
		case store.DurabilitySync:
			out = append(out, m.ID)
		case store.DurabilityCrossZoneSync:
			// An instance with no zone might be in any zone, the
			// primary's included, so it cannot count as another zone.
			if known && zone != "" && m.Zone != "" && m.Zone != zone {
				out = append(out, m.ID)
			}
		}
	}
	slices.Sort(out)
	return out
}

// SynchronousStandbyNames is the synchronous_standby_names value that
// enforces policy on primary: ANY 1 of the policy's standbys (replicas
// use their instance id as application_name), or "" when the policy is
// async or no replica qualifies.
func SynchronousStandbyNames(policy store.Durability, primary string, members []Member) string {
	names := SyncStandbys(policy, primary, members)
	if len(names) == 0 {
		return ""
	}
	quoted := make([]string, len(names))
	for i, n := range names {
		// A quoted identifier, as Postgres parses the list.
		quoted[i] = `"` + strings.ReplaceAll(n, `"`, `""`) + `"`
	}
	return "ANY 1 (" + strings.Join(quoted, ", ") + ")"
}

// DurabilityInput names a shard and, optionally, its primary.
type DurabilityInput struct {
	Shard string
	// Primary is the instance to configure; "" means the recorded
	// primary or, when none is recorded, the one instance reporting
	// itself primary.
	Primary string
}

// ApplyDurability sets synchronous_standby_names on the shard's primary
// as its recorded policy requires and returns the value set.
func (a *Activities) ApplyDurability(ctx context.Context, in DurabilityInput) (string, error) {
	defer heartbeating(ctx)()
	st, err := a.shardState(ctx, in.Shard)
	if err != nil {
		return "", err
	}
	recs, err := a.shardRecords(ctx, in.Shard)
	if err != nil {
		return "", err
	}
	primary := in.Primary
	if primary == "" {
		primary = st.Primary
	}
	if primary == "" {
		primary, err = soleReportedPrimary(in.Shard, recs)
		if err != nil {
			return "", err
		}
	}
	members := make([]Member, 0, len(recs))
	for _, r := range recs {
		members = append(members, Member{ID: r.InstanceID, Zone: r.Zone})
	}
	names := SynchronousStandbyNames(st.Durability, primary, members)
	_, c, err := a.dial(ctx, in.Shard, primary)
	if err != nil {
		return "", err
	}
	if _, err := c.SetSynchronousStandbys(ctx, &pb.SetSynchronousStandbysRequest{Names: names}); err != nil {
		return "", sidecarError("setting synchronous standbys on", primary, err)
	}
	return names, nil
}

// soleReportedPrimary is the one registered instance that calls itself
// primary, for shards whose ShardState names none yet.
func soleReportedPrimary(shard string, recs []store.Record) (string, error) {
	var found []string
	for _, r := range recs {
		if r.Role == store.RolePrimary {
			found = append(found, r.InstanceID)
		}
	}
	if len(found) != 1 {
		return "", Refuse(notInState, "shard %s records no primary and %d instances report being one", shard, len(found))
	}
	return found[0], nil
}
