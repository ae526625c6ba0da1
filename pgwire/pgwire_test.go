package pgwire

import (
	"errors"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/pgerr"
)

func TestErrorRoundTrip(t *testing.T) {
	in := &pgerr.Error{Code: "42P01", Message: "relation \"x\" does not exist", Detail: "d"}
	msg := AppendError(nil, "ERROR", in)
	var seen int
	if err := Messages(msg, func(typ byte, m []byte) error {
		seen++
		if typ != 'E' {
			t.Errorf("type %q", typ)
		}
		return nil
	}); err != nil || seen != 1 {
		t.Fatalf("walk: %v, %d messages", err, seen)
	}
	out := ParseError(msg)
	if *out != *in {
		t.Errorf("round trip: %+v, want %+v", out, in)
	}
	if got := ParseError(AppendError(nil, "FATAL", errors.New("plain"))); got.Code != pgerr.InternalError || got.Message != "plain" {
		t.Errorf("plain error: %+v", got)
	}
	if err := Messages([]byte{'Z', 0, 0, 0, 9, 'I'}, func(byte, []byte) error { return nil }); err == nil {
		t.Error("a truncated message passed")
	}
}

func TestQuoteLiteral(t *testing.T) {
	for in, want := range map[string]string{`it's`: `'it''s'`, `a\b`: `E'a\\b'`, `\'`: `E'\\'''`, "": `''`} {
		if got := QuoteLiteral(in); got != want {
			t.Errorf("QuoteLiteral(%q) = %s, want %s", in, got, want)
		}
	}
}

func TestNoticeDecodes(t *testing.T) {
	msg := AppendNotice(nil, "migration m1 started")
	if msg[0] != 'N' {
		t.Fatalf("type %q", msg[0])
	}
	var n pgproto3.NoticeResponse
	if err := n.Decode(msg[5:]); err != nil {
		t.Fatal(err)
	}
	if n.Severity != "NOTICE" || n.Code != "00000" || n.Message != "migration m1 started" {
		t.Errorf("decoded %+v", n)
	}
}

// DataRow and RowDescription read back what pgproto3 writes; a message
// cut short reads as nil.
func TestRowMessagesDecode(t *testing.T) {
	row, err := (&pgproto3.DataRow{Values: [][]byte{[]byte("a"), nil, {}}}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	got := DataRowValues(row)
	if len(got) != 3 || string(got[0]) != "a" || got[1] != nil || got[2] == nil || len(got[2]) != 0 {
		t.Fatalf("DataRowValues = %q", got)
	}
	if DataRowValues(row[:len(row)-2]) != nil {
		t.Fatalf("a cut DataRow decoded")
	}
	desc, err := (&pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{
		{Name: []byte("id"), DataTypeOID: 20}, {Name: []byte("name"), DataTypeOID: 25}}}).Encode(nil)
	if err != nil {
		t.Fatal(err)
	}
	if names := RowDescriptionNames(desc); strings.Join(names, ",") != "id,name" {
		t.Fatalf("RowDescriptionNames = %v", names)
	}
	if types := RowDescriptionTypes(desc); len(types) != 2 || types[0] != 20 || types[1] != 25 {
		t.Fatalf("RowDescriptionTypes = %v", types)
	}
	if RowDescriptionTypes(desc[:len(desc)-3]) != nil {
		t.Fatalf("a cut RowDescription decoded")
	}
}
