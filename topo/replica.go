package topo

import "encoding/json"

// ReplicaReads returns the topology replica reads route by: t itself
// unless a shard group has replica key ranges or a table a replica_reads
// binding, else the topology with those groups' key ranges replaced by
// their replica key ranges and those tables' bindings by their
// replica_reads. It is
// computed once, at parse time, so a router pays nothing per query for
// it, and a topology without replica key ranges costs nothing at all.
func (t *Topology) ReplicaReads() *Topology {
	if t.replica != nil {
		return t.replica
	}
	return t
}

// HasReplicaReads reports whether some group's replica reads route
// differently from its primary reads and writes.
func (t *Topology) HasReplicaReads() bool { return t.replica != nil }

// replicaView builds ReplicaReads' topology of a validated t, or nil
// when no group has replica key ranges. The view must itself be valid
// (a group that gains ranges needs a shard index): its problems are t's.
func replicaView(t *Topology, ps *problems) *Topology {
	d := t.doc()
	changed := false
	for i := range d.ShardGroups {
		g := &d.ShardGroups[i]
		if g.ReplicaKeyRanges != nil {
			g.KeyRanges, g.ReplicaKeyRanges, changed = g.ReplicaKeyRanges, nil, true
		}
	}
	for _, db := range d.Databases {
		for _, s := range db.Schemas {
			for name, tb := range s.Tables {
				if tb.ReplicaReads != nil {
					s.Tables[name], changed = *tb.ReplicaReads, true
				}
			}
		}
	}
	if !changed {
		return nil
	}
	doc, err := json.Marshal(d)
	if err != nil {
		ps.add("", "replica reads' topology: %v", err)
		return nil
	}
	view, err := Parse(doc)
	if err != nil {
		if ve, ok := err.(*ValidationError); ok {
			for _, p := range ve.Problems {
				ps.add(p.Path, "in the view of replica reads (replica_key_ranges and replica_reads in place): %s", p.Reason)
			}
			return nil
		}
		ps.add("", "replica reads' topology: %v", err)
		return nil
	}
	return view
}
