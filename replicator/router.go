package replicator

import (
	"bufio"
	"io"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

// outBufferSize is each target's write buffer: large enough that a target
// receives few, large writes, small enough for many targets.
const outBufferSize = 64 << 10

// CopyRouter splits binary COPY streams among target shards by a table's
// placement in the target topology. For each tuple it decodes only the
// shard-key field, asks the placement for the shard (topo's routing, the
// router's own), and forwards the tuple's bytes unchanged to that shard's
// stream. Each target receives a complete binary COPY stream, header and
// trailer included, ready for COPY ... FROM STDIN (FORMAT binary).
//
// A CopyRouter reuses its buffers from one Route call to the next, so that
// routing allocates nothing per row; it is not safe for concurrent use.
type CopyRouter struct {
	placement *topo.Placement
	keyField  int
	keyType   shardfunc.ColumnType
	shards    []string
	targetOf  map[string]int

	rd     copyReader
	out    []*bufio.Writer
	counts []int64

	capture []int
	last    [][]byte
	lastNul []bool
	rows    int64
}

// NewCopyRouter returns a router for a table placed by p, whose shard key
// is field keyField (0-based, in the COPY's column order) of type keyType.
// shards are the targets, in the order Route's writers follow; a row that
// p routes to a shard not listed is an error, not a silent drop.
func NewCopyRouter(p *topo.Placement, keyField int, keyType shardfunc.ColumnType, shards []string) (*CopyRouter, error) {
	if p == nil || p.IsReference() {
		return nil, pgerr.New(pgerr.FeatureNotSupported, "a reference table is copied whole, not routed by key")
	}
	if keyField < 0 {
		return nil, pgerr.New(pgerr.InvalidParameterValue, "shard-key field index %d is negative", keyField)
	}
	if p.Index != nil {
		if err := p.Index.Func.Accepts(keyType); err != nil {
			return nil, err
		}
	}
	if len(shards) == 0 {
		return nil, pgerr.New(pgerr.InvalidParameterValue, "a copy needs at least one target shard")
	}
	r := &CopyRouter{
		placement: p,
		keyField:  keyField,
		keyType:   keyType,
		shards:    append([]string(nil), shards...),
		targetOf:  make(map[string]int, len(shards)),
		out:       make([]*bufio.Writer, len(shards)),
		counts:    make([]int64, len(shards)),
	}
	for i, s := range shards {
		if _, dup := r.targetOf[s]; dup {
			return nil, pgerr.New(pgerr.InvalidParameterValue, "target shard %q listed twice", s)
		}
		r.targetOf[s] = i
		r.out[i] = bufio.NewWriterSize(io.Discard, outBufferSize)
	}
	return r, nil
}

// Capture makes Route keep the bytes of these fields of the last tuple it
// routes (LastFields): the copy learns a batch's last primary key this way,
// without decoding the key of every row.
func (r *CopyRouter) Capture(fields ...int) {
	r.capture = append(r.capture[:0], fields...)
	r.last = make([][]byte, len(fields))
	r.lastNul = make([]bool, len(fields))
}

// LastFields returns the captured fields of the last tuple routed by the
// latest Route call (nil entries for NULLs); valid until the next call.
func (r *CopyRouter) LastFields() [][]byte {
	out := r.last
	for i := range out {
		if r.lastNul[i] {
			out[i] = nil
		}
	}
	return out
}

// Rows is the number of tuples the latest Route call read.
func (r *CopyRouter) Rows() int64 { return r.rows }

// TargetRows is the number of tuples the latest Route call sent to target i.
func (r *CopyRouter) TargetRows(i int) int64 { return r.counts[i] }

// Shards returns the target shards in writer order.
func (r *CopyRouter) Shards() []string { return r.shards }

// KeyOf returns the routing key and target index of a shard-key value in
// binary format, exactly as Route places a tuple carrying it.
func (r *CopyRouter) KeyOf(raw []byte) (key uint64, target int, err error) {
	key, shard, err := r.placement.Route(r.keyType, shardfunc.BinaryFormat, raw)
	if err != nil {
		return 0, -1, err
	}
	t, ok := r.targetOf[shard]
	if !ok {
		return key, -1, pgerr.New(pgerr.ObjectNotInPrerequisiteState,
			"a row routes to shard %q (routing key %016x), which is not a target of this copy", shard, key)
	}
	return key, t, nil
}

// Route reads one binary COPY stream from src and writes each target's
// share to dst[i], a complete binary COPY stream. A nil dst[i] drops that
// target's rows (they are still counted): a resumed copy skips targets that
// already hold a batch. Malformed input is an error (SQLSTATE 22P04), as
// is a NULL or undecodable shard key; what was written before it is then
// not a complete stream, and the caller must abandon the targets' COPY.
func (r *CopyRouter) Route(src io.Reader, dst []io.Writer) error {
	if len(dst) != len(r.shards) {
		return pgerr.New(pgerr.InternalError, "Route got %d writers for %d targets", len(dst), len(r.shards))
	}
	r.rows = 0
	for i := range r.counts {
		r.counts[i] = 0
		if dst[i] == nil {
			r.out[i].Reset(io.Discard)
		} else {
			r.out[i].Reset(dst[i])
		}
	}
	for i := range r.lastNul {
		r.lastNul[i] = true
	}
	r.rd.reset(src)
	if err := r.rd.readHeader(); err != nil {
		return err
	}
	for i := range r.out {
		if _, err := r.out[i].Write(copyHeader); err != nil {
			return err
		}
	}
	for {
		t, key, keyNull, done, err := r.rd.next(r.keyField)
		if err != nil {
			return err
		}
		if done {
			break
		}
		if keyNull {
			return pgerr.New(pgerr.InvalidParameterValue,
				"row %d has a NULL shard key (field %d): it cannot be placed on a shard", r.rows+1, r.keyField+1)
		}
		_, target, err := r.KeyOf(key)
		if err != nil {
			return err
		}
		if _, err := r.out[target].Write(t.raw); err != nil {
			return err
		}
		r.counts[target]++
		r.rows++
		for i, f := range r.capture {
			if f >= r.rd.fields {
				return pgerr.New(pgerr.InternalError, "captured field %d, but tuples have %d fields", f+1, r.rd.fields)
			}
			b, ok := t.field(f)
			r.last[i] = append(r.last[i][:0], b...)
			r.lastNul[i] = !ok
		}
	}
	for i := range r.out {
		if _, err := r.out[i].Write(copyTrailer); err != nil {
			return err
		}
		if err := r.out[i].Flush(); err != nil {
			return err
		}
		// Drop the reference to the caller's writer.
		r.out[i].Reset(io.Discard)
	}
	return nil
}
