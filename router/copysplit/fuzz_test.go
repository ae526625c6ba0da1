package copysplit

import (
	"bytes"
	"fmt"
	"testing"
)

// FuzzSplit feeds arbitrary streams to the splitter in every format, whole
// and in small chunks: it must not panic, the pieces must be the stream's
// bytes in order (a prefix of it: text stops at the end marker), and
// chunking must not change which rows are found or their keys.
func FuzzSplit(f *testing.F) {
	f.Add([]byte("1\tk1\tx\n2\tk\\t2\ty\\\nz\n3\t\\N\tw\n\\.\n"), uint8(0), uint8(3))
	f.Add([]byte("id,v\n\"a,b\",\"multi\nline\"\n\"q\"\"x\",1\n,\n"), uint8(1), uint8(2))
	f.Add([]byte("a\r\nb\r\n\\.\r\n"), uint8(0), uint8(1))
	one, two := int64(1), int64(2)
	f.Add(binaryStream([][2]*int64{{&one, &two}, {&two, nil}}, true), uint8(2), uint8(5))
	f.Fuzz(func(t *testing.T, input []byte, format, chunk uint8) {
		o := textOptions(Format(format%3), 2, int(chunk)%2)
		o.Header = chunk%4 == 1 && o.Format != Binary
		whole, errWhole := split(t, o, input, 0)
		parts, errParts := split(t, o, input, int(chunk%7)+1)
		if (errWhole == nil) != (errParts == nil) {
			t.Fatalf("whole: %v, chunked: %v", errWhole, errParts)
		}
		if errWhole != nil {
			return
		}
		for _, got := range [][]piece{whole, parts} {
			if !bytes.HasPrefix(input, []byte(joined(got))) {
				t.Fatalf("the pieces are not the stream:\n%q\n%+v", input, got)
			}
		}
		if joined(whole) != joined(parts) || placed(whole) != placed(parts) {
			t.Fatalf("chunking changed the split:\n%+v\n%+v", whole, parts)
		}
	})
}

// placed renders the pieces before the first Misfit (after it, how the
// rest is cut depends on the chunks).
func placed(ps []piece) string {
	var b bytes.Buffer
	for _, p := range ps {
		if p.Kind == Misfit {
			break
		}
		fmt.Fprintf(&b, "%+v\n", p)
	}
	return b.String()
}
