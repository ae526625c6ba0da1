package replicator

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"testing/iotest"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/shardfunc"
)

const topologies = "../testdata/topologies"

func loadTopology(t testing.TB, name string) *topo.Topology {
	t.Helper()
	doc, err := os.ReadFile(filepath.Join(topologies, name))
	if err != nil {
		t.Fatal(err)
	}
	top, err := topo.Parse(doc)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return top
}

// copyStream builds a binary COPY stream; a nil field is a NULL.
func copyStream(rows [][][]byte) []byte {
	b := append([]byte{}, copyHeader...)
	for _, row := range rows {
		b = appendTuple(b, row)
	}
	return append(b, copyTrailer...)
}

func appendTuple(b []byte, row [][]byte) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(row)))
	for _, f := range row {
		if f == nil {
			b = binary.BigEndian.AppendUint32(b, 0xffffffff)
			continue
		}
		b = binary.BigEndian.AppendUint32(b, uint32(len(f)))
		b = append(b, f...)
	}
	return b
}

func int8Bytes(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// splitTuples is the test's own, independent reading of a binary COPY
// stream: it checks header and trailer and returns each tuple's bytes.
func splitTuples(t *testing.T, stream []byte) [][]byte {
	t.Helper()
	if !bytes.HasPrefix(stream, copyHeader) {
		t.Fatalf("output does not start with a binary COPY header: % x", stream[:min(len(stream), 19)])
	}
	p := stream[len(copyHeader):]
	var out [][]byte
	for {
		if len(p) < 2 {
			t.Fatalf("output ends without a trailer")
		}
		n := int16(binary.BigEndian.Uint16(p))
		if n == -1 {
			if len(p) != 2 {
				t.Fatalf("%d bytes after the trailer", len(p)-2)
			}
			return out
		}
		off := 2
		for i := 0; i < int(n); i++ {
			l := int32(binary.BigEndian.Uint32(p[off:]))
			off += 4
			if l > 0 {
				off += int(l)
			}
		}
		out = append(out, p[:off])
		p = p[off:]
	}
}

func customersRouter(t testing.TB, shards ...string) (*topo.Placement, *CopyRouter) {
	t.Helper()
	top := loadTopology(t, "store_xxhash.json")
	p := top.Resolve("store", "public", "customers")
	if len(shards) == 0 {
		shards = []string{"customer-shard-1", "customer-shard-2"}
	}
	r, err := NewCopyRouter(p, 1, shardfunc.Int8, shards)
	if err != nil {
		t.Fatal(err)
	}
	return p, r
}

// customerRows are (name text, customer_id int8, note text-or-NULL) rows,
// some with values larger than the reader's chunk.
func customerRows(n int) [][][]byte {
	rows := make([][][]byte, n)
	for i := range rows {
		var note []byte
		switch {
		case i%7 == 0:
			note = nil
		case i%97 == 0:
			note = bytes.Repeat([]byte{byte(i)}, 100<<10)
		default:
			note = []byte(fmt.Sprintf("note %d", i))
		}
		rows[i] = [][]byte{[]byte(fmt.Sprintf("customer-%d", i)), int8Bytes(int64(i*7919 - 5000)), note}
	}
	return rows
}

func TestRouteSplitsRowsByPlacement(t *testing.T) {
	p, r := customersRouter(t)
	rows := customerRows(2000)
	in := copyStream(rows)
	for _, name := range []string{"whole", "one byte at a time"} {
		t.Run(name, func(t *testing.T) {
			var src io.Reader = bytes.NewReader(in)
			if name != "whole" {
				src = iotest.OneByteReader(src)
			}
			var out [2]bytes.Buffer
			if err := r.Route(src, []io.Writer{&out[0], &out[1]}); err != nil {
				t.Fatal(err)
			}
			if r.Rows() != int64(len(rows)) {
				t.Fatalf("routed %d rows, want %d", r.Rows(), len(rows))
			}
			var want [2][][]byte
			for _, row := range rows {
				v := int64(binary.BigEndian.Uint64(row[1]))
				_, shard, err := p.RouteInt(v)
				if err != nil {
					t.Fatal(err)
				}
				i := 0
				if shard == "customer-shard-2" {
					i = 1
				}
				want[i] = append(want[i], appendTuple(nil, row))
			}
			for i := range out {
				got := splitTuples(t, out[i].Bytes())
				if len(got) != len(want[i]) || len(got) == 0 {
					t.Fatalf("target %d got %d tuples, want %d", i, len(got), len(want[i]))
				}
				for j := range got {
					if !bytes.Equal(got[j], want[i][j]) {
						t.Fatalf("target %d tuple %d differs from the input tuple", i, j)
					}
				}
				if r.TargetRows(i) != int64(len(want[i])) {
					t.Errorf("TargetRows(%d) = %d, want %d", i, r.TargetRows(i), len(want[i]))
				}
			}
		})
	}
}

func TestRouteNilWriterDropsTargetRows(t *testing.T) {
	_, r := customersRouter(t)
	var kept bytes.Buffer
	if err := r.Route(bytes.NewReader(copyStream(customerRows(300))), []io.Writer{&kept, nil}); err != nil {
		t.Fatal(err)
	}
	if got := len(splitTuples(t, kept.Bytes())); int64(got) != r.TargetRows(0) || got == 0 || r.TargetRows(1) == 0 {
		t.Fatalf("kept %d tuples; counts %d and %d", got, r.TargetRows(0), r.TargetRows(1))
	}
}

func TestRouteCapturesLastTupleFields(t *testing.T) {
	_, r := customersRouter(t)
	r.Capture(0, 2)
	rows := customerRows(50)
	if err := r.Route(bytes.NewReader(copyStream(rows)), []io.Writer{io.Discard, io.Discard}); err != nil {
		t.Fatal(err)
	}
	last := r.LastFields()
	if string(last[0]) != "customer-49" || last[1] != nil {
		t.Fatalf("LastFields = %q, want customer-49 and NULL (row 49 has a NULL note)", last)
	}
}

func TestRouteErrors(t *testing.T) {
	good := copyStream(customerRows(3))
	withFlags := func(flags uint32) []byte {
		b := append([]byte{}, good...)
		binary.BigEndian.PutUint32(b[len(copySignature):], flags)
		return b
	}
	cases := []struct {
		name  string
		in    []byte
		state string
	}{
		{"empty input", nil, badCopyFileFormat},
		{"text COPY", []byte("1\tfoo\n"), badCopyFileFormat},
		{"no trailer", good[:len(good)-2], badCopyFileFormat},
		{"tuple cut short", good[:len(good)-9], badCopyFileFormat},
		{"data after trailer", append(append([]byte{}, good...), 0), badCopyFileFormat},
		{"OIDs", withFlags(oidsFlag), badCopyFileFormat},
		{"critical flag", withFlags(1 << 20), badCopyFileFormat},
		{"field count changes", copyStream([][][]byte{
			{[]byte("a"), int8Bytes(1), nil},
			{[]byte("b"), int8Bytes(2)},
		}), badCopyFileFormat},
		{"key field missing", copyStream([][][]byte{{[]byte("a")}}), badCopyFileFormat},
		{"negative field length", append(append(append([]byte{}, copyHeader...), 0, 2, 0xff, 0xff, 0xff, 0xf0), copyTrailer...), badCopyFileFormat},
		{"NULL shard key", copyStream([][][]byte{{[]byte("a"), nil, nil}}), pgerr.InvalidParameterValue},
		{"int8 key of 4 bytes", copyStream([][][]byte{{[]byte("a"), {0, 0, 0, 1}, nil}}), pgerr.InvalidBinaryRepresention},
	}
	_, r := customersRouter(t)
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			err := r.Route(bytes.NewReader(c.in), []io.Writer{io.Discard, io.Discard})
			if err == nil {
				t.Fatal("Route accepted it")
			}
			if got := pgerr.Code(err); got != c.state {
				t.Fatalf("SQLSTATE %s (%v), want %s", got, err, c.state)
			}
		})
	}
}

func TestRouteRefusesRowForShardThatIsNotATarget(t *testing.T) {
	_, r := customersRouter(t, "customer-shard-1")
	err := r.Route(bytes.NewReader(copyStream(customerRows(100))), []io.Writer{io.Discard})
	if pgerr.Code(err) != pgerr.ObjectNotInPrerequisiteState {
		t.Fatalf("got %v, want a 55000 error naming customer-shard-2", err)
	}
}

func TestNewCopyRouterRefusesWhatItCannotRoute(t *testing.T) {
	top := loadTopology(t, "store_range.json")
	p := top.Resolve("store", "public", "customers")
	if _, err := NewCopyRouter(p, 0, shardfunc.Text, []string{"customer-shard-1"}); pgerr.Code(err) != pgerr.FeatureNotSupported {
		t.Errorf("a text key under a range index: got %v, want 0A000", err)
	}
	if _, err := NewCopyRouter(p, 0, shardfunc.Int8, []string{"a", "a"}); err == nil {
		t.Error("a target listed twice was accepted")
	}
	if _, err := NewCopyRouter(p, 0, shardfunc.Int8, nil); err == nil {
		t.Error("no targets was accepted")
	}
}

// Routing runs for every row of every table moved: after the first call,
// which sizes the buffers, it must not allocate at all.
func TestRouteDoesNotAllocatePerRow(t *testing.T) {
	_, r := customersRouter(t)
	r.Capture(1)
	var rows [][][]byte
	for i := 0; i < 5000; i++ {
		rows = append(rows, [][]byte{[]byte(fmt.Sprintf("customer-%d", i)), int8Bytes(int64(i)), []byte("note")})
	}
	in := copyStream(rows)
	src := bytes.NewReader(in)
	dst := []io.Writer{io.Discard, io.Discard}
	allocs := testing.AllocsPerRun(20, func() {
		src.Reset(in)
		if err := r.Route(src, dst); err != nil {
			t.Fatal(err)
		}
	})
	if allocs != 0 {
		t.Fatalf("Route of %d rows allocates %.1f times per call", len(rows), allocs)
	}
}

func BenchmarkRouteCopyRows(b *testing.B) {
	_, r := customersRouter(b)
	var rows [][][]byte
	for i := 0; i < 10000; i++ {
		rows = append(rows, [][]byte{[]byte(fmt.Sprintf("customer-%d", i)), int8Bytes(int64(i)), []byte("a note of a few dozen bytes, like most rows")})
	}
	in := copyStream(rows)
	src := bytes.NewReader(in)
	dst := []io.Writer{io.Discard, io.Discard}
	b.SetBytes(int64(len(in)))
	b.ReportAllocs()
	for b.Loop() {
		src.Reset(in)
		if err := r.Route(src, dst); err != nil {
			b.Fatal(err)
		}
	}
	// One op is a stream of len(rows) rows; allocs/op covers them all.
	b.ReportMetric(float64(b.N)*float64(len(rows))/b.Elapsed().Seconds(), "rows/s")
}
