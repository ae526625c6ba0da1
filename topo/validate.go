package topo

import "fmt"

// validate checks the semantic rules of a decoded topology and precomputes
// every placement, so that Resolve is a few map lookups.
func validate(t *Topology, ps *problems) {
	before := len(ps.list)
	t.groups = map[string]*ShardGroup{}
	for i, g := range t.ShardGroups {
		p := index("shard_groups", i)
		switch {
		case g.UID == "":
			ps.add(join(p, "uid"), "required")
		case t.groups[g.UID] != nil:
			ps.add(join(p, "uid"), "duplicate shard group %q", g.UID)
		default:
			t.groups[g.UID] = g
		}
		if g.DefaultShardIndex != "" && t.ShardIndexes[g.DefaultShardIndex] == nil {
			ps.add(join(p, "default_shard_index"), "no shard index named %q", g.DefaultShardIndex)
		}
		checkRanges(p, g, ps)
		if g.ReplicaKeyRanges != nil {
			coverage(join(p, "replica_key_ranges"), g.ReplicaKeyRanges, ps)
			if g.UID == t.AuthoritativeShardGroup {
				ps.add(join(p, "replica_key_ranges"), "the authoritative shard group does not move: it takes no replica key ranges")
			}
		}
	}

	switch auth := t.groups[t.AuthoritativeShardGroup]; {
	case t.AuthoritativeShardGroup == "":
		ps.add("authoritative_shard_group", "required")
	case auth == nil:
		ps.add("authoritative_shard_group", "no shard group named %q", t.AuthoritativeShardGroup)
	case len(auth.KeyRanges) != 1 || auth.KeyRanges[0].Start != "" || auth.KeyRanges[0].End != "":
		ps.add("authoritative_shard_group", "shard group %q must have exactly one key range, unbounded at both ends", auth.UID)
	}
	if t.DefaultShardGroup != "" && t.DefaultShardGroup != t.AuthoritativeShardGroup {
		ps.add("default_shard_group", "must be omitted or equal to authoritative_shard_group %q", t.AuthoritativeShardGroup)
	}
	if len(ps.list) > before {
		return // placements need valid groups and ranges
	}

	pl := placer{t: t, ps: ps, cache: map[string]*Placement{}}
	t.clusterDefault = pl.placement("", t.AuthoritativeShardGroup, "", nil)
	for _, dbName := range sortedKeys(t.Databases) {
		db := t.Databases[dbName]
		dpath := join("databases", dbName)
		dbGroup := pl.group(join(dpath, "default_shard_group"), db.DefaultShardGroup, t.AuthoritativeShardGroup)
		db.unlisted = pl.placement(join(dpath, "default_shard_group"), dbGroup, "", nil)
		for _, sName := range sortedKeys(db.Schemas) {
			s := db.Schemas[sName]
			spath := join(join(dpath, "schemas"), sName)
			sGroup := pl.group(join(spath, "default_shard_group"), s.DefaultShardGroup, dbGroup)
			s.unlisted = pl.placement(join(spath, "default_shard_group"), sGroup, "", nil)
			for _, tName := range sortedKeys(s.Tables) {
				tb := s.Tables[tName]
				tpath := join(join(spath, "tables"), tName)
				g := pl.group(join(tpath, "shard_group"), tb.ShardGroup, sGroup)
				tb.placement = pl.placement(tpath, g, tb.ShardIndex, tb.AlternateShardIndexes)
			}
			for _, rName := range sortedKeys(s.ReferenceTables) {
				r := s.ReferenceTables[rName]
				rpath := join(join(spath, "reference_tables"), rName)
				if s.Tables[rName] != nil {
					ps.add(rpath, "table %q is also listed under tables", rName)
				}
				r.placement = pl.reference(rpath, r.ShardGroups)
			}
		}
	}
}

// placer builds Placements, sharing equal ones.
type placer struct {
	t     *Topology
	ps    *problems
	cache map[string]*Placement
}

// group returns uid when it names a group, or fallback when uid is empty.
func (pl placer) group(path, uid, fallback string) string {
	if uid == "" {
		return fallback
	}
	if pl.t.groups[uid] == nil {
		pl.ps.add(path, "no shard group named %q", uid)
		return fallback
	}
	return uid
}

func (pl placer) placement(path, groupUID, indexName string, alternates []string) *Placement {
	g := pl.t.groups[groupUID]
	if indexName == "" {
		indexName = g.DefaultShardIndex
	} else if pl.t.ShardIndexes[indexName] == nil {
		pl.ps.add(join(path, "shard_index"), "no shard index named %q", indexName)
		return nil
	}
	if indexName == "" && !g.SingleShard() {
		pl.ps.add(path, "shard group %q has %d key ranges but neither it nor the table names a shard index", g.UID, len(g.byStart))
		return nil
	}
	key := fmt.Sprintf("%s\x00%s\x00%q", groupUID, indexName, alternates)
	if p := pl.cache[key]; p != nil {
		return p
	}
	p := &Placement{Group: g}
	if indexName != "" {
		p.Index = pl.t.ShardIndexes[indexName]
	}
	seen := map[string]bool{indexName: true}
	for i, a := range alternates {
		apath := index(join(path, "alternate_shard_indexes"), i)
		switch ix := pl.t.ShardIndexes[a]; {
		case ix == nil:
			pl.ps.add(apath, "no shard index named %q", a)
		case seen[a]:
			pl.ps.add(apath, "shard index %q is already the table's index or an earlier alternate", a)
		default:
			seen[a] = true
			p.Alternates = append(p.Alternates, ix)
		}
	}
	pl.cache[key] = p
	return p
}

func (pl placer) reference(path string, groups []string) *Placement {
	if len(groups) == 0 {
		pl.ps.add(join(path, "shard_groups"), "a reference table needs at least one shard group")
		return nil
	}
	p := &Placement{}
	seen := map[string]bool{}
	for i, uid := range groups {
		g := pl.t.groups[uid]
		switch {
		case g == nil:
			pl.ps.add(index(join(path, "shard_groups"), i), "no shard group named %q", uid)
		case seen[uid]:
			pl.ps.add(index(join(path, "shard_groups"), i), "shard group %q listed twice", uid)
		default:
			seen[uid] = true
			p.ReferenceGroups = append(p.ReferenceGroups, g)
		}
	}
	return p
}
