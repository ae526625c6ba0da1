package topo

import (
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// Placement says where a table's rows live: a shard group and the shard
// index that routes them, or, for a reference table, the groups on each of
// whose shards a full copy lives. Placements are shared and immutable.
type Placement struct {
	Group *ShardGroup // nil for a reference table
	// Index routes rows; nil when the group has a single shard and no
	// index is named, so every row is on that shard.
	Index *ShardIndex
	// Alternates are further indexes reads may route by. A row's alternate
	// keys must land on the shard its placement key chose.
	Alternates []*ShardIndex
	// ReferenceGroups is set for reference tables only.
	ReferenceGroups []*ShardGroup
}

// IsReference reports whether the table is a reference table.
func (p *Placement) IsReference() bool { return p.ReferenceGroups != nil }

// ShardColumn returns the column the placement index routes by, or "" when
// rows are not routed by value (single-shard groups, reference tables).
func (p *Placement) ShardColumn() string {
	if p.Index == nil {
		return ""
	}
	return p.Index.Column()
}

// Alternate returns the alternate index routing by column, if any.
func (p *Placement) Alternate(column string) *ShardIndex {
	for _, a := range p.Alternates {
		if a.Column() == column {
			return a
		}
	}
	return nil
}

// Resolve returns the placement of db.schema.table, following the order
// table, schema default, database default, cluster default. It always
// returns a placement (an unlisted table inherits one) and never allocates.
func (t *Topology) Resolve(db, schema, table string) *Placement {
	d := t.Databases[db]
	if d == nil {
		return t.clusterDefault
	}
	s := d.Schemas[schema]
	if s == nil {
		return d.unlisted
	}
	if tb := s.Tables[table]; tb != nil {
		return tb.placement
	}
	if r := s.ReferenceTables[table]; r != nil {
		return r.placement
	}
	return s.unlisted
}

// RouteInt returns the routing key and shard of an integer shard-key value.
// It does not allocate unless it fails.
func (p *Placement) RouteInt(v int64) (key uint64, shard string, err error) {
	return p.RouteIntBy(p.Index, v)
}

// RouteIntBy routes an integer value by ix, the placement index or one of
// the alternates, over the placement's group.
func (p *Placement) RouteIntBy(ix *ShardIndex, v int64) (uint64, string, error) {
	if err := p.routable(ix); err != nil {
		return 0, "", err
	}
	if ix == nil {
		return 0, p.Group.byStart[0].ShardUID, nil
	}
	key, err := ix.Func.KeyInt(v)
	if err != nil {
		return 0, "", err
	}
	return key, p.Group.ShardFor(key), nil
}

// Route returns the routing key and shard of a shard-key value of type typ
// as a client sent it (text or binary format).
func (p *Placement) Route(typ shardfunc.ColumnType, f shardfunc.Format, raw []byte) (uint64, string, error) {
	return p.RouteBy(p.Index, typ, f, raw)
}

// RouteBy routes a value by ix, the placement index or one of the
// alternates, over the placement's group.
func (p *Placement) RouteBy(ix *ShardIndex, typ shardfunc.ColumnType, f shardfunc.Format, raw []byte) (uint64, string, error) {
	if err := p.routable(ix); err != nil {
		return 0, "", err
	}
	if ix == nil {
		return 0, p.Group.byStart[0].ShardUID, nil
	}
	key, err := ix.Func.Key(typ, f, raw)
	if err != nil {
		return 0, "", err
	}
	return key, p.Group.ShardFor(key), nil
}

func (p *Placement) routable(ix *ShardIndex) error {
	if p.Group == nil {
		return pgerr.New(pgerr.FeatureNotSupported, "a reference table is not routed by value")
	}
	if ix == nil && !p.Group.SingleShard() {
		return pgerr.New(pgerr.InternalError, "placement in group %q has no shard index", p.Group.UID)
	}
	return nil
}

// CheckAlternateKey verifies that a row whose placement routing key is
// placementKey and whose routing key under alternate index alt is altKey
// would be read, through alt, from the shard it is stored on. A write that
// breaks this is refused (SQLSTATE 23514, like a violated check constraint):
// the row would exist but be invisible to reads by the alternate key.
func (p *Placement) CheckAlternateKey(placementKey uint64, alt *ShardIndex, altKey uint64) error {
	if p.Group == nil || p.Group.SingleShard() {
		return nil
	}
	home, via := p.Group.ShardFor(placementKey), p.Group.ShardFor(altKey)
	if home == via {
		return nil
	}
	return &pgerr.Error{
		Code: pgerr.CheckViolation,
		Message: "row's " + alt.Column() + " routes to shard " + via + " by shard index " + alt.Name +
			", but the row is placed on shard " + home,
		Detail: "alternate shard index keys must route to the same shard as the placement key",
	}
}
