package copysplit

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"testing"
)

// piece is a Piece with its bytes copied.
type piece struct {
	Kind Kind
	Data string
	Key  string
	Null bool
}

// split feeds input in chunks of the given size (0: whole) and returns
// the pieces.
func split(t testing.TB, o Options, input []byte, chunk int) ([]piece, error) {
	t.Helper()
	s := New(o)
	var out []piece
	emit := func(p Piece) error {
		out = append(out, piece{p.Kind, string(p.Data), string(p.Key), p.Null})
		return nil
	}
	if chunk <= 0 {
		chunk = len(input) + 1
	}
	for at := 0; at < len(input); at += chunk {
		if err := s.Write(input[at:min(at+chunk, len(input))], emit); err != nil {
			return out, err
		}
	}
	return out, s.End(emit)
}

func textOptions(format Format, columns, key int) Options {
	o := Options{Format: format, Columns: columns, Key: key}
	o.Defaults(false, false, false, false)
	return o
}

func TestTextRows(t *testing.T) {
	o := textOptions(Text, 3, 1)
	in := "1\tk1\tx\n2\tk\\t2\ty\\\nz\n3\t\\N\tw\n4\tk\\x41\\101\t\n5\n6\tlast\tz"
	want := []piece{
		{Row, "1\tk1\tx\n", "k1", false},
		{Row, "2\tk\\t2\ty\\\nz\n", "k\t2", false},
		{Row, "3\t\\N\tw\n", "", true},
		{Row, "4\tk\\x41\\101\t\n", "kAA", false},
		{Misfit, "5\n", "", false},
		{Row, "6\tlast\tz", "last", false},
	}
	for _, chunk := range []int{0, 1, 2, 3, 7} {
		got, err := split(t, o, []byte(in), chunk)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("chunk %d:\n got %+v\nwant %+v", chunk, got, want)
		}
	}
}

func TestTextEndMarkerAndLineEndings(t *testing.T) {
	o := textOptions(Text, 1, 0)
	got, _ := split(t, o, []byte("a\r\nb\r\n\\.\r\nignored\n"), 1)
	want := []piece{{Row, "a\r\n", "a", false}, {Row, "b\r\n", "b", false}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("CRLF with end marker: got %+v want %+v", got, want)
	}
	// A bare carriage return ends lines when the first line ends so;
	// a newline afterwards is what Postgres refuses: a Misfit.
	got, _ = split(t, o, []byte("a\rb\rc\nd\r"), 0)
	want = []piece{{Row, "a\r", "a", false}, {Row, "b\r", "b", false}, {Misfit, "c\nd\r", "", false}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("CR: got %+v want %+v", got, want)
	}
	// A marker after data is not a plain end.
	got, _ = split(t, o, []byte("a\nb\\.\nc\n"), 0)
	want = []piece{{Row, "a\n", "a", false}, {Misfit, "b\\.\nc\n", "", false}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("marker after data: got %+v want %+v", got, want)
	}
}

func TestCSVRows(t *testing.T) {
	o := textOptions(CSV, 2, 0)
	o.Header = true
	in := "id,v\n\"a,b\",\"multi\nline\"\n\"q\"\"x\",1\n,null key\n\"\",empty\n\\.x,data\nplain,\"unterminated\n"
	want := []piece{
		{Preamble, "id,v\n", "", false},
		{Row, "\"a,b\",\"multi\nline\"\n", "a,b", false},
		{Row, "\"q\"\"x\",1\n", "q\"x", false},
		{Row, ",null key\n", "", true},
		{Row, "\"\",empty\n", "", false},
		{Row, "\\.x,data\n", "\\.x", false},
		{Misfit, "plain,\"unterminated\n", "", false},
	}
	for _, chunk := range []int{0, 1, 5} {
		got, err := split(t, o, []byte(in), chunk)
		if err != nil {
			t.Fatal(err)
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Errorf("chunk %d:\n got %+v\nwant %+v", chunk, got, want)
		}
	}
	// Another escape, and FORCE_NULL / FORCE_NOT_NULL.
	o = textOptions(CSV, 2, 1)
	o.Escape, o.Delimiter, o.Null, o.ForceNull = '\\', ';', "NIL", true
	got, _ := split(t, o, []byte("1;\"a\\\"b\\\\\"\n2;\"NIL\"\n"), 0)
	want = []piece{{Row, "1;\"a\\\"b\\\\\"\n", "a\"b\\", false}, {Row, "2;\"NIL\"\n", "", true}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("escape and FORCE_NULL: got %+v want %+v", got, want)
	}
	o.ForceNull, o.ForceNotNull = false, true
	got, _ = split(t, o, []byte("3;NIL\n"), 0)
	want = []piece{{Row, "3;NIL\n", "NIL", false}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("FORCE_NOT_NULL: got %+v want %+v", got, want)
	}
}

// binaryStream builds a binary COPY stream of rows of two int8 fields
// (nil: NULL) with the trailer.
func binaryStream(rows [][2]*int64, trailer bool) []byte {
	b := append([]byte(nil), binarySignature...)
	b = binary.BigEndian.AppendUint32(b, 0)
	b = binary.BigEndian.AppendUint32(b, 0)
	for _, r := range rows {
		b = binary.BigEndian.AppendUint16(b, 2)
		for _, v := range r {
			if v == nil {
				b = binary.BigEndian.AppendUint32(b, 0xffffffff)
				continue
			}
			b = binary.BigEndian.AppendUint32(b, 8)
			b = binary.BigEndian.AppendUint64(b, uint64(*v))
		}
	}
	if trailer {
		b = binary.BigEndian.AppendUint16(b, 0xffff)
	}
	return b
}

func TestBinaryRows(t *testing.T) {
	o := Options{Format: Binary, Columns: 2, Key: 1}
	one, two := int64(1), int64(2)
	in := binaryStream([][2]*int64{{&one, &two}, {&two, nil}}, true)
	for _, chunk := range []int{0, 1, 3} {
		got, err := split(t, o, in, chunk)
		if err != nil {
			t.Fatal(err)
		}
		if len(got) != 4 || got[0].Kind != Preamble || got[1].Kind != Row || got[2].Kind != Row || got[3].Kind != Trailer {
			t.Fatalf("chunk %d: %+v", chunk, got)
		}
		if !bytes.Equal([]byte(got[1].Key), binary.BigEndian.AppendUint64(nil, 2)) || !got[2].Null {
			t.Errorf("chunk %d: keys %+v", chunk, got)
		}
		if joined(got) != string(in) {
			t.Errorf("chunk %d: the pieces are not the stream", chunk)
		}
	}
	// A wrong field count, or data after the trailer: Misfits.
	o.Columns = 3
	got, _ := split(t, o, in, 0)
	if len(got) != 2 || got[1].Kind != Misfit {
		t.Errorf("field count: %+v", got)
	}
	o.Columns = 2
	got, _ = split(t, o, append(in, 0, 2), 0)
	if got[len(got)-1].Kind != Misfit {
		t.Errorf("after trailer: %+v", got)
	}
	got, _ = split(t, o, []byte("not a copy file"), 0)
	if len(got) != 1 || got[0].Kind != Misfit {
		t.Errorf("bad signature: %+v", got)
	}
}

func joined(ps []piece) string {
	var b bytes.Buffer
	for _, p := range ps {
		b.WriteString(p.Data)
	}
	return b.String()
}
