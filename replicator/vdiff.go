package replicator

import (
	"context"
	"errors"
	"fmt"
	"math/big"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
)

// DefaultDiffChunkRows bounds the rows a VDiff chunk holds on any one side
// when Differ.ChunkRows is zero.
const DefaultDiffChunkRows = 1000

// DefaultDiffListed bounds the differences a report lists when
// Differ.MaxListed is zero; the rest are counted.
const DefaultDiffListed = 1000

// DiffKind is how a key differs.
type DiffKind string

const (
	// DiffMissing: the row is on a source, not on the target that owns it.
	DiffMissing DiffKind = "missing"
	// DiffExtra: the row is on its owning target, on no source.
	DiffExtra DiffKind = "extra"
	// DiffChanged: source and owning target hold the key with different
	// values; Columns names them.
	DiffChanged DiffKind = "changed"
	// DiffWrongShard: the row is on a target whose key range does not own
	// its shard key, whether or not the source has it.
	DiffWrongShard DiffKind = "wrong_shard"
	// DiffSourceDuplicate: two sources hold the key; the move's sources
	// are meant to be disjoint.
	DiffSourceDuplicate DiffKind = "source_duplicate"
)

// Difference is one differing key. A key may appear in several (missing
// on its owner and on a wrong shard, say).
type Difference struct {
	Kind DiffKind `json:"kind"`
	// Key is the order key's columns in text form.
	Key []string `json:"key"`
	// Shard is the target concerned: the owner that lacks the row
	// (missing), or the target holding it (extra, changed, wrong_shard),
	// or the second source (source_duplicate).
	Shard   string   `json:"shard"`
	Columns []string `json:"columns,omitempty"` // changed: which ones
}

// DiffReport is a VDiff's progress and its result: JSON-serialisable, it
// is the state a workflow keeps between activity attempts. Diff continues
// after After; the report is complete when Done.
type DiffReport struct {
	Table string `json:"table"`
	// After is the last chunk boundary compared (the order key in text
	// form); nil: nothing compared yet.
	After []string `json:"after,omitempty"`
	Done  bool     `json:"done"`

	Chunks          int64 `json:"chunks"`
	DifferingChunks int64 `json:"differing_chunks"`
	SourceRows      int64 `json:"source_rows"` // rows compared
	TargetRows      int64 `json:"target_rows"`
	// Counts is the number of differences of each kind, listed or not.
	Counts      map[DiffKind]int64 `json:"counts,omitempty"`
	Differences []Difference       `json:"differences,omitempty"`
	// Unlisted counts the differences beyond the listing bound.
	Unlisted int64 `json:"unlisted,omitempty"`
}

// Total is the number of differences found so far.
func (r *DiffReport) Total() int64 {
	var n int64
	for _, c := range r.Counts {
		n += c
	}
	return n
}

// DiffSide is one shard as a diff reads it: a read-only REPEATABLE READ
// transaction begun with BeginDiffRead, so the shard reads as of one
// snapshot throughout.
type DiffSide struct {
	Shard string
	Read  pgx.Tx
}

// Differ compares a table on the source shards with the target shards of
// a move, each read in its own snapshot: the caller brings them to one
// consistent point (see OpenDiffSnapshot). Chunks of the order key are
// compared by row count and a hash each side computes; only a chunk that
// differs is read row by row.
type Differ struct {
	Table     *Table          // as DescribeTable read it on a source
	Placement *topo.Placement // the table's placement in the target topology
	Sources   []DiffSide
	Targets   []DiffSide // each target shard of the placement
	// ChunkRows bounds the rows of a chunk on every side; zero means
	// DefaultDiffChunkRows.
	ChunkRows int
	// MaxListed bounds Differences; zero means DefaultDiffListed.
	MaxListed int
	// MaxChunks, when above zero, makes Diff return after comparing that
	// many chunks, Done false: a workflow's activity diffs a bounded
	// stretch per attempt and keeps the report.
	MaxChunks int
}

// Diff compares the chunks after from.After (a zero DiffReport: from the
// start) and returns the report with them added. A diff stopped between
// two calls resumes after the last chunk its report holds; resumed on new
// snapshots, the chunks already compared keep their earlier results. On an
// error the report returned is as of the last whole chunk, ready to resume.
func (d *Differ) Diff(ctx context.Context, from DiffReport) (DiffReport, error) {
	r := from.clone()
	if r.Done {
		return r, nil
	}
	r.Table = d.Table.DisplayName()
	if err := d.check(); err != nil {
		return r, err
	}
	chunkRows := d.ChunkRows
	if chunkRows <= 0 {
		chunkRows = DefaultDiffChunkRows
	}
	for n := 0; d.MaxChunks <= 0 || n < d.MaxChunks; n++ {
		whole := r.clone()
		upper, err := d.chunkEnd(ctx, r.After, chunkRows)
		if err != nil {
			return whole, err
		}
		if err := d.compareChunk(ctx, &r, r.After, upper); err != nil {
			return whole, err
		}
		r.Chunks++
		if upper == nil {
			r.Done = true
			break
		}
		r.After = upper
	}
	return r, nil
}

// clone copies a report deeply: a chunk adds to the copy, and a chunk that
// fails leaves the original as it was.
func (r DiffReport) clone() DiffReport {
	c := r
	c.After = append([]string(nil), r.After...)
	if r.After == nil {
		c.After = nil
	}
	c.Counts = nil
	for k, v := range r.Counts {
		if c.Counts == nil {
			c.Counts = make(map[DiffKind]int64, len(r.Counts))
		}
		c.Counts[k] = v
	}
	c.Differences = append([]Difference(nil), r.Differences...)
	return c
}

func (d *Differ) check() error {
	if d.Placement == nil || d.Placement.IsReference() {
		return pgerr.New(pgerr.FeatureNotSupported, "VDiff compares a table placed by key; %s is not", d.Table.DisplayName())
	}
	if len(d.Sources) == 0 || len(d.Targets) == 0 {
		return pgerr.New(pgerr.InvalidParameterValue, "a diff needs at least one source and one target")
	}
	seen := map[string]bool{}
	for _, s := range d.Targets {
		if seen[s.Shard] {
			return pgerr.New(pgerr.InvalidParameterValue, "target shard %q listed twice", s.Shard)
		}
		seen[s.Shard] = true
	}
	return nil
}

// compareChunk compares the keys after lo up to and including hi (nil: to
// the end) and adds the chunk's rows and differences to r.
//
// Each source row is routed (by its shard key, with the target placement)
// to the target that owns it, and the rows bound for each target are
// summed there: count and a 128-bit sum of each row's md5. Each target
// sums its own rows. Comparing per target, not all targets together,
// catches a row that sits on the wrong target instead of its owner.
func (d *Differ) compareChunk(ctx context.Context, r *DiffReport, lo, hi []string) error {
	// Every side is its own server: they all read at once.
	targetOf := d.targetIndex()
	want := make([][]chunkSum, len(d.Sources)) // by source, by owning target
	got := make([]chunkSum, len(d.Targets))
	errs := make([]error, len(d.Sources)+len(d.Targets))
	var wg sync.WaitGroup
	for i, s := range d.Sources {
		wg.Add(1)
		go func() {
			defer wg.Done()
			want[i] = make([]chunkSum, len(d.Targets))
			if err := d.sumSourceChunk(ctx, s, targetOf, want[i], lo, hi); err != nil {
				errs[i] = fmt.Errorf("diff %s on source %s: %w", d.Table.DisplayName(), s.Shard, err)
			}
		}()
	}
	for i, tg := range d.Targets {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var s1, s2 string
			if err := tg.Read.QueryRow(ctx, d.chunkSumQuery(lo, hi)).Scan(&got[i].rows, &s1, &s2); err != nil {
				errs[len(d.Sources)+i] = fmt.Errorf("diff %s on target %s: %w", d.Table.DisplayName(), tg.Shard, err)
			}
			got[i].h1.SetString(s1, 10)
			got[i].h2.SetString(s2, 10)
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return err
	}
	differs := false
	for i := range d.Targets {
		var w chunkSum
		for _, bySource := range want {
			w.merge(&bySource[i])
		}
		r.SourceRows += w.rows
		r.TargetRows += got[i].rows
		if !got[i].equal(&w) {
			differs = true
		}
	}
	if !differs {
		return nil
	}
	r.DifferingChunks++
	return d.compareRows(ctx, r, lo, hi)
}

// sumSourceChunk reads a source's rows of a chunk (shard key and md5) and
// adds each to the sum of the target that owns it.
func (d *Differ) sumSourceChunk(ctx context.Context, s DiffSide, targetOf map[string]int, sums []chunkSum, lo, hi []string) error {
	rows, err := s.Read.Query(ctx, d.rowHashQuery(lo, hi))
	if err != nil {
		return err
	}
	var shardKey string
	var h1, h2 int64
	_, err = pgx.ForEachRow(rows, []any{&shardKey, &h1, &h2}, func() error {
		i, err := d.owner(targetOf, shardKey)
		if err != nil {
			return err
		}
		sums[i].add(h1, h2)
		return nil
	})
	return err
}

func (d *Differ) targetIndex() map[string]int {
	m := make(map[string]int, len(d.Targets))
	for i, t := range d.Targets {
		m[t.Shard] = i
	}
	return m
}

// chunkSum is a chunk's rows on one target: their count and the sums of
// the two halves of their md5s, as exact integers. Sums do not depend on
// the order rows come in, so a source's rows can be summed per owner as
// they stream by; unlike xor, two equal rows do not cancel out.
type chunkSum struct {
	rows   int64
	h1, h2 big.Int
}

func (c *chunkSum) add(h1, h2 int64) {
	var v big.Int
	c.rows++
	c.h1.Add(&c.h1, v.SetInt64(h1))
	c.h2.Add(&c.h2, v.SetInt64(h2))
}

func (c *chunkSum) merge(o *chunkSum) {
	c.rows += o.rows
	c.h1.Add(&c.h1, &o.h1)
	c.h2.Add(&c.h2, &o.h2)
}

func (c *chunkSum) equal(o *chunkSum) bool {
	return c.rows == o.rows && c.h1.Cmp(&o.h1) == 0 && c.h2.Cmp(&o.h2) == 0
}

// addDifference counts a difference and lists it while under the bound.
func (d *Differ) addDifference(r *DiffReport, diff Difference) {
	max := d.MaxListed
	if max <= 0 {
		max = DefaultDiffListed
	}
	if r.Counts == nil {
		r.Counts = map[DiffKind]int64{}
	}
	r.Counts[diff.Kind]++
	if len(r.Differences) < max {
		r.Differences = append(r.Differences, diff)
	} else {
		r.Unlisted++
	}
}
