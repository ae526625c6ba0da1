package topo

import "github.com/tesseradb/tessera/topo/shardfunc"

// Topology is a parsed, validated data topology. It is immutable.
type Topology struct {
	AuthoritativeShardGroup string
	// DefaultShardGroup is the cluster-wide default as written; empty means
	// the authoritative group.
	DefaultShardGroup string
	ShardIndexes      map[string]*ShardIndex
	ShardGroups       []*ShardGroup
	Databases         map[string]*Database

	groups         map[string]*ShardGroup
	clusterDefault *Placement
	// replica is the topology replica reads route by, when a group has
	// replica key ranges (ReplicaReads); nil when none has.
	replica *Topology
}

// ShardIndex says how a table's shard-key column becomes a routing key.
type ShardIndex struct {
	Name    string
	Func    shardfunc.Func
	Columns []string // exactly one for now
}

// Column is the index's single shard-key column.
func (ix *ShardIndex) Column() string { return ix.Columns[0] }

// ShardGroup is a named set of shards, each owning key ranges of the 64-bit
// routing space. Its ranges cover the whole space exactly once.
type ShardGroup struct {
	UID               string
	DefaultShardIndex string
	KeyRanges         []KeyRange // as written
	// ReplicaKeyRanges, when set, are the key ranges replica reads
	// (sessions with tessera.target = replica) of the group's tables
	// route by instead of KeyRanges: a data movement's reads-first
	// SwitchTraffic sets them to its targets' ranges while primary reads
	// and writes stay on KeyRanges' shards. Usually empty.
	ReplicaKeyRanges []KeyRange

	// byStart holds KeyRanges sorted by start; starts mirrors their starts
	// for the binary search in ShardFor.
	byStart []KeyRange
	starts  []uint64
}

// KeyRange assigns the routing keys in [start, end) to one shard. Bounds are
// written as hexadecimal prefixes of the 64-bit space ("80" is
// 0x8000000000000000); an empty bound is unbounded.
type KeyRange struct {
	ShardUID string
	Start    string
	End      string

	start   uint64 // inclusive
	end     uint64 // exclusive; meaningless when endOpen
	endOpen bool
}

// Contains reports whether key is in the range.
func (r KeyRange) Contains(key uint64) bool {
	return key >= r.start && (r.endOpen || key < r.end)
}

// Shards returns the group's distinct shard uids in key order.
func (g *ShardGroup) Shards() []string {
	var out []string
	seen := map[string]bool{}
	for _, r := range g.byStart {
		if !seen[r.ShardUID] {
			seen[r.ShardUID] = true
			out = append(out, r.ShardUID)
		}
	}
	return out
}

// ShardFor returns the shard that owns a routing key. It does not allocate.
func (g *ShardGroup) ShardFor(key uint64) string {
	// The last range whose start <= key; ranges cover the space, so it
	// exists and contains key.
	lo, hi := 0, len(g.starts)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if g.starts[m] <= key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return g.byStart[lo-1].ShardUID
}

// SingleShard reports whether the group has exactly one range, so every row
// of its tables is on one shard and no shard index is needed.
func (g *ShardGroup) SingleShard() bool { return len(g.byStart) == 1 }

// Database binds the schemas of one Postgres database.
type Database struct {
	DefaultShardGroup string
	Schemas           map[string]*Schema

	unlisted *Placement // placement of a table in an unlisted schema
}

// Schema binds the tables of one schema.
type Schema struct {
	DefaultShardGroup string
	Tables            map[string]*Table
	ReferenceTables   map[string]*ReferenceTable

	unlisted *Placement // placement of an unlisted table
}

// Table binds one table to a shard group and index.
type Table struct {
	ShardGroup            string
	ShardIndex            string
	AlternateShardIndexes []string
	// ReplicaReads, when set, is the binding replica reads (sessions with
	// tessera.target = replica) of the table route by instead of this
	// one: a MoveTables' reads-first SwitchTraffic sets it to the
	// table's binding in the target group. Usually nil.
	ReplicaReads *Table

	placement  *Placement
	replicaDoc any // ReplicaReads as decoded JSON, until parsed
}

// ReferenceTable is a table copied in full to every shard of its groups.
type ReferenceTable struct {
	ShardGroups []string

	placement *Placement
}

// Group returns the shard group with the given uid.
func (t *Topology) Group(uid string) (*ShardGroup, bool) {
	g, ok := t.groups[uid]
	return g, ok
}

// Authoritative returns the authoritative shard group.
func (t *Topology) Authoritative() *ShardGroup { return t.groups[t.AuthoritativeShardGroup] }

// AuthoritativeShard returns the uid of the authoritative shard, home of
// database-wide metadata (roles, sequences, schema).
func (t *Topology) AuthoritativeShard() string { return t.Authoritative().byStart[0].ShardUID }

// Shards returns every shard uid named by the topology, sorted.
func (t *Topology) Shards() []string {
	seen := map[string]bool{}
	var out []string
	for _, g := range t.ShardGroups {
		for _, s := range g.Shards() {
			if !seen[s] {
				seen[s] = true
				out = append(out, s)
			}
		}
	}
	sortStrings(out)
	return out
}
