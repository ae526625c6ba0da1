package router

import (
	"slices"
	"testing"

	"github.com/jackc/pgx/v5/pgproto3"
)

// TestHiddenFormatsInBind: the shards' Bind gets one result format per
// column, the client's for its own and text for the hidden ones; no
// formats, and a count Postgres refuses, stay as sent.
func TestHiddenFormatsInBind(t *testing.T) {
	for _, c := range []struct {
		client, want []int16
	}{
		{nil, nil},
		{[]int16{1}, []int16{1, 1, 0, 0}},
		{[]int16{0, 1}, []int16{0, 1, 0, 0}},
		{[]int16{1, 1, 1}, []int16{1, 1, 1}},
	} {
		bind, err := (&pgproto3.Bind{PreparedStatement: "s", Parameters: [][]byte{[]byte("7"), nil}, ResultFormatCodes: c.client}).Encode(nil)
		if err != nil {
			t.Fatal(err)
		}
		sync, _ := (&pgproto3.Sync{}).Encode(nil)
		out, err := withHiddenFormats(append(bind, sync...), 2, 2)
		if err != nil {
			t.Fatal(err)
		}
		if got := resultFormats(out); !slices.Equal(got, c.want) {
			t.Errorf("client formats %v: shards get %v, want %v", c.client, got, c.want)
		}
		var b pgproto3.Bind
		if err := b.Decode(out[5 : len(out)-len(sync)]); err != nil || b.PreparedStatement != "s" || len(b.Parameters) != 2 || string(b.Parameters[0]) != "7" || b.Parameters[1] != nil {
			t.Errorf("client formats %v: the Bind became %+v (%v)", c.client, b, err)
		}
		if out[len(out)-len(sync)] != 'S' {
			t.Errorf("client formats %v: the Sync is lost", c.client)
		}
	}
}

// TestRowDescriptionWithoutHiddenFields: the client sees its statement's
// fields only.
func TestRowDescriptionWithoutHiddenFields(t *testing.T) {
	rd := pgproto3.RowDescription{Fields: []pgproto3.FieldDescription{
		{Name: []byte("kind"), DataTypeOID: 23, DataTypeSize: 4, TypeModifier: -1},
		{Name: []byte("avg"), DataTypeOID: 1700, DataTypeSize: -1, TypeModifier: -1, Format: 1},
		{Name: []byte("sum"), DataTypeOID: 1700, DataTypeSize: -1, TypeModifier: -1},
	}}
	msg, _ := rd.Encode(nil)
	out, err := withoutHiddenFields(msg, 2)
	if err != nil {
		t.Fatal(err)
	}
	var got pgproto3.RowDescription
	if err := got.Decode(out[5:]); err != nil {
		t.Fatal(err)
	}
	if len(got.Fields) != 2 || string(got.Fields[1].Name) != "avg" || got.Fields[1].Format != 1 || got.Fields[1].DataTypeOID != 1700 {
		t.Fatalf("got %+v", got.Fields)
	}
	if _, err := withoutHiddenFields(msg[:20], 2); err == nil {
		t.Fatal("a truncated RowDescription was cut without error")
	}
}
