package router

import (
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestExecuteRowLimit: a gather refuses an Execute with a row limit (its
// computing transaction could not resume a suspended portal).
func TestExecuteRowLimit(t *testing.T) {
	batch := func(maxRows uint32) []byte {
		b, _ := (&pgproto3.Bind{PreparedStatement: "s"}).Encode(nil)
		b, _ = (&pgproto3.Execute{Portal: "p", MaxRows: maxRows}).Encode(b)
		b, _ = (&pgproto3.Sync{}).Encode(b)
		return b
	}
	if executeRowLimit(batch(0)) || executeRowLimit(queryMessage("SELECT 1")) {
		t.Error("no row limit taken for one")
	}
	if !executeRowLimit(batch(5)) {
		t.Error("row limit 5 not seen")
	}
}

// TestSkipCopyHeader: each shard's binary COPY header goes, with its
// extension, whatever follows it in the same CopyData.
func TestSkipCopyHeader(t *testing.T) {
	row := []byte{0, 1, 0, 0, 0, 1, 'x'}
	if got := skipCopyHeader(append(append([]byte(nil), binaryCopyHeader...), row...)); string(got) != string(row) {
		t.Errorf("got %q", got)
	}
	ext := append([]byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x02ab"), row...)
	if got := skipCopyHeader(ext); string(got) != string(row) {
		t.Errorf("with an extension: got %q", got)
	}
	if got := skipCopyHeader([]byte("PGCOPY")); got != nil {
		t.Errorf("short: got %q", got)
	}
}
