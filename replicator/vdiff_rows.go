package replicator

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// diffRow is one side's row of a differing chunk.
type diffRow struct {
	side     int
	key      []string
	shardKey string
	cols     []string // each column's md5, or 'null'
}

// compareRows reads a differing chunk row by row on every side and adds a
// difference for each key that is missing on its owner, extra, changed,
// on a target that does not own it, or on two sources. Every target is
// read, not only the owner of a key: a stray copy is found wherever it is.
func (d *Differ) compareRows(ctx context.Context, r *DiffReport, lo, hi []string) error {
	var order []string // keys by first appearance: sources' order, then targets'
	source := map[string]diffRow{}
	held := map[string][]diffRow{}
	read := func(side DiffSide, i int, onSource bool) error {
		rows, err := side.Read.Query(ctx, d.rowsQuery(lo, hi))
		if err != nil {
			return err
		}
		var row diffRow
		_, err = pgx.ForEachRow(rows, []any{&row.key, &row.shardKey, &row.cols}, func() error {
			row.side = i
			k := strings.Join(row.key, "\x00")
			_, onSrc := source[k]
			if !onSrc && held[k] == nil {
				order = append(order, k)
			}
			if !onSource {
				held[k] = append(held[k], row)
			} else if onSrc {
				d.addDifference(r, Difference{Kind: DiffSourceDuplicate, Key: row.key, Shard: side.Shard})
			} else {
				source[k] = row
			}
			row = diffRow{}
			return nil
		})
		return err
	}
	for i, s := range d.Sources {
		if err := read(s, i, true); err != nil {
			return fmt.Errorf("diff %s on source %s: %w", d.Table.DisplayName(), s.Shard, err)
		}
	}
	for i, tg := range d.Targets {
		if err := read(tg, i, false); err != nil {
			return fmt.Errorf("diff %s on target %s: %w", d.Table.DisplayName(), tg.Shard, err)
		}
	}
	targetOf := d.targetIndex()
	for _, k := range order {
		if err := d.classify(r, targetOf, source, held[k], k); err != nil {
			return err
		}
	}
	return nil
}

// classify adds the differences of one key. A key the source holds is
// owned by the target its source row's shard key routes to; a key only
// targets hold, by each target row's own shard key.
func (d *Differ) classify(r *DiffReport, targetOf map[string]int, source map[string]diffRow, holders []diffRow, k string) error {
	src, onSource := source[k]
	if !onSource {
		for _, h := range holders {
			owner, err := d.owner(targetOf, h.shardKey)
			if err != nil {
				return err
			}
			kind := DiffExtra
			if owner != h.side {
				kind = DiffWrongShard
			}
			d.addDifference(r, Difference{Kind: kind, Key: h.key, Shard: d.Targets[h.side].Shard})
		}
		return nil
	}
	owner, err := d.owner(targetOf, src.shardKey)
	if err != nil {
		return err
	}
	onOwner := false
	for _, h := range holders {
		if h.side != owner {
			d.addDifference(r, Difference{Kind: DiffWrongShard, Key: h.key, Shard: d.Targets[h.side].Shard})
			continue
		}
		onOwner = true
		var changed []string
		for j, c := range d.Table.Columns {
			if h.cols[j] != src.cols[j] {
				changed = append(changed, c.Name)
			}
		}
		if changed != nil {
			d.addDifference(r, Difference{Kind: DiffChanged, Key: h.key, Shard: d.Targets[h.side].Shard, Columns: changed})
		}
	}
	if !onOwner {
		d.addDifference(r, Difference{Kind: DiffMissing, Key: src.key, Shard: d.Targets[owner].Shard})
	}
	return nil
}

// owner returns the index of the target whose key range holds a shard-key
// value (in text form).
func (d *Differ) owner(targetOf map[string]int, shardKey string) (int, error) {
	_, shard, err := d.Placement.Route(d.Table.ShardKeyType, shardfunc.TextFormat, []byte(shardKey))
	if err != nil {
		return -1, err
	}
	i, ok := targetOf[shard]
	if !ok {
		return -1, pgerr.New(pgerr.ObjectNotInPrerequisiteState, "diff %s: shard key %s routes to shard %q, which is not a target of this diff",
			d.Table.DisplayName(), shardKey, shard)
	}
	return i, nil
}
