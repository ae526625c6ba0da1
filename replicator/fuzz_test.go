package replicator

import (
	"bytes"
	"io"
	"testing"

	"github.com/tesseradb/tessera/pgerr"
)

// FuzzCopyRouter feeds arbitrary bytes to the COPY parser: malformed input
// must give an error with a SQLSTATE, never a panic, and input it accepts
// must come out as valid streams holding exactly the tuples that went in.
func FuzzCopyRouter(f *testing.F) {
	f.Add(copyStream(customerRows(3)))
	f.Add(copyStream(nil))
	f.Add(copyStream([][][]byte{{[]byte("a"), nil, nil}}))
	f.Add(copyStream([][][]byte{{[]byte("a"), int8Bytes(1)}}))
	f.Add([]byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x7f\xff\xff\xff"))
	f.Add(append(append([]byte{}, copyHeader...), 0, 3, 0x7f, 0xff, 0xff, 0xff))
	_, r := customersRouter(f)
	f.Fuzz(func(t *testing.T, in []byte) {
		var out [2]bytes.Buffer
		err := r.Route(bytes.NewReader(in), []io.Writer{&out[0], &out[1]})
		if err != nil {
			if pgerr.Code(err) == pgerr.InternalError {
				t.Fatalf("error without a SQLSTATE of its own: %v", err)
			}
			return
		}
		n := 0
		for i := range out {
			got := splitTuples(t, out[i].Bytes())
			if int64(len(got)) != r.TargetRows(i) {
				t.Fatalf("target %d: %d tuples written, %d counted", i, len(got), r.TargetRows(i))
			}
			n += len(got)
		}
		if int64(n) != r.Rows() {
			t.Fatalf("%d tuples out, %d in", n, r.Rows())
		}
	})
}
