package topo

import (
	"encoding/json"

	"github.com/tesseradb/tessera/topo/shardfunc"
)

// The document form of a topology, for writing it back out. Parse reads
// the same shape through its strict decoder.
type (
	docTopology struct {
		AuthoritativeShardGroup string                 `json:"authoritative_shard_group"`
		DefaultShardGroup       string                 `json:"default_shard_group,omitempty"`
		ShardIndexes            map[string]docIndex    `json:"shard_indexes,omitempty"`
		ShardGroups             []docGroup             `json:"shard_groups"`
		Databases               map[string]docDatabase `json:"databases,omitempty"`
	}
	docIndex struct {
		Type        string         `json:"type"`
		Columns     []string       `json:"columns"`
		IndexParams map[string]any `json:"index_params,omitempty"`
	}
	docGroup struct {
		UID               string     `json:"uid"`
		DefaultShardIndex string     `json:"default_shard_index,omitempty"`
		KeyRanges         []docRange `json:"key_ranges"`
		ReplicaKeyRanges  []docRange `json:"replica_key_ranges,omitempty"`
	}
	docRange struct {
		ShardUID string `json:"shard_uid"`
		Start    string `json:"start,omitempty"`
		End      string `json:"end,omitempty"`
	}
	docDatabase struct {
		DefaultShardGroup string               `json:"default_shard_group,omitempty"`
		Schemas           map[string]docSchema `json:"schemas,omitempty"`
	}
	docSchema struct {
		DefaultShardGroup string                       `json:"default_shard_group,omitempty"`
		Tables            map[string]docTable          `json:"tables,omitempty"`
		ReferenceTables   map[string]docReferenceTable `json:"reference_tables,omitempty"`
	}
	docTable struct {
		ShardGroup            string    `json:"shard_group,omitempty"`
		ShardIndex            string    `json:"shard_index,omitempty"`
		AlternateShardIndexes []string  `json:"alternate_shard_indexes,omitempty"`
		ReplicaReads          *docTable `json:"replica_reads,omitempty"`
	}
	docReferenceTable struct {
		ShardGroups []string `json:"shard_groups"`
	}
)

func docRanges(ranges []KeyRange) []docRange {
	var out []docRange
	for _, r := range ranges {
		out = append(out, docRange{ShardUID: r.ShardUID, Start: r.Start, End: r.End})
	}
	return out
}

// MarshalJSON writes the topology as a document Parse accepts, with keys
// in a fixed order, so equal topologies give equal bytes.
func (t *Topology) MarshalJSON() ([]byte, error) {
	return json.MarshalIndent(t.doc(), "", "  ")
}

// doc is the topology's document form.
func (t *Topology) doc() docTopology {
	d := docTopology{
		AuthoritativeShardGroup: t.AuthoritativeShardGroup,
		DefaultShardGroup:       t.DefaultShardGroup,
		ShardIndexes:            map[string]docIndex{},
		Databases:               map[string]docDatabase{},
	}
	for name, ix := range t.ShardIndexes {
		di := docIndex{Type: ix.Func.Kind.String(), Columns: ix.Columns}
		if ix.Func.Kind == shardfunc.Modulo {
			di.IndexParams = map[string]any{"modulus": ix.Func.Modulus}
		}
		d.ShardIndexes[name] = di
	}
	for _, g := range t.ShardGroups {
		dg := docGroup{UID: g.UID, DefaultShardIndex: g.DefaultShardIndex}
		dg.KeyRanges = docRanges(g.KeyRanges)
		dg.ReplicaKeyRanges = docRanges(g.ReplicaKeyRanges)
		d.ShardGroups = append(d.ShardGroups, dg)
	}
	for dbName, db := range t.Databases {
		dd := docDatabase{DefaultShardGroup: db.DefaultShardGroup, Schemas: map[string]docSchema{}}
		for sName, s := range db.Schemas {
			ds := docSchema{DefaultShardGroup: s.DefaultShardGroup, Tables: map[string]docTable{}, ReferenceTables: map[string]docReferenceTable{}}
			for tName, tb := range s.Tables {
				dt := docTable{ShardGroup: tb.ShardGroup, ShardIndex: tb.ShardIndex, AlternateShardIndexes: tb.AlternateShardIndexes}
				if r := tb.ReplicaReads; r != nil {
					dt.ReplicaReads = &docTable{ShardGroup: r.ShardGroup, ShardIndex: r.ShardIndex, AlternateShardIndexes: r.AlternateShardIndexes}
				}
				ds.Tables[tName] = dt
			}
			for rName, r := range s.ReferenceTables {
				ds.ReferenceTables[rName] = docReferenceTable{ShardGroups: r.ShardGroups}
			}
			dd.Schemas[sName] = ds
		}
		d.Databases[dbName] = dd
	}
	return d
}
