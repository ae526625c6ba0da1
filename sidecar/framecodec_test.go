package sidecar

import (
	"bytes"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"

	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

func codecRequests() []*pb.SessionRequest {
	long := strings.Repeat("x", 300) // lengths that need two varint bytes
	return []*pb.SessionRequest{
		{},
		{Msg: &pb.SessionRequest_Open{Open: &pb.Open{Database: "postgres", User: "app", CancelToken: "tok"}}},
		{Msg: &pb.SessionRequest_Open{Open: &pb.Open{}}},
		{Msg: &pb.SessionRequest_Batch{Batch: &pb.Batch{}}},
		{Msg: &pb.SessionRequest_Batch{Batch: &pb.Batch{Mode: pb.Mode_TRANSACTION, Frontend: []byte("Q\x00\x00\x00\x0dSELECT 1\x00")}}},
		{Msg: &pb.SessionRequest_Batch{Batch: &pb.Batch{
			Mode:     pb.Mode_SESSION,
			Frontend: bytes.Repeat([]byte{'S', 0, 0, 0, 4}, 5000),
			Settings: []*pb.Setting{{Name: "application_name", Value: "héllo"}, {Name: "search_path", Value: long}, {}},
			Prepared: []*pb.PreparedStatement{
				{Name: "s1", Query: "SELECT $1::int", ParamOids: []uint32{23, 0, 4294967295}},
				{Name: "s2", Query: long},
			},
			SameSettings:  true,
			PreparedNames: []string{"a", "", long},
			PreparedReset: true,
			Autocommit:    true,
		}}},
	}
}

func codecResponses() []*pb.SessionResponse {
	return []*pb.SessionResponse{
		{},
		{Backend: []byte("Z\x00\x00\x00\x05I"), Done: true, TxStatus: pb.TxStatus_IDLE},
		{Backend: bytes.Repeat([]byte("D"), 70000), TxStatus: pb.TxStatus_FAILED, CopyIn: true, Async: true},
		{ErrorCode: "08006", ErrorMessage: strings.Repeat("é", 100)},
	}
}

// TestFrameCodecMatchesProto: the hand-written encoding is protobuf's,
// byte for byte, and decodes what proto.Marshal encodes.
func TestFrameCodecMatchesProto(t *testing.T) {
	for i, want := range codecRequests() {
		ours := appendRequest(nil, want)
		theirs, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ours, theirs) {
			t.Errorf("request %d: encoded as %x, proto says %x", i, ours, theirs)
		}
		got := new(pb.SessionRequest)
		if err := decodeRequest(theirs, got); err != nil || !proto.Equal(got, want) {
			t.Errorf("request %d: decoded %v (%v), want %v", i, got, err, want)
		}
	}
	for i, want := range codecResponses() {
		ours := appendResponse(nil, want)
		theirs, err := proto.MarshalOptions{Deterministic: true}.Marshal(want)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(ours, theirs) {
			t.Errorf("response %d: encoded as %x, proto says %x", i, ours, theirs)
		}
		got := new(pb.SessionResponse)
		if err := decodeResponse(theirs, got); err != nil || !proto.Equal(got, want) {
			t.Errorf("response %d: decoded %v (%v), want %v", i, got, err, want)
		}
	}
}

// TestFrameCodecRefusesMalformedFrames: truncations, wrong wire types and
// invalid UTF-8 in strings are errors, not panics or partial messages.
func TestFrameCodecRefusesMalformedFrames(t *testing.T) {
	whole := appendRequest(nil, codecRequests()[5])
	for n := 1; n < 40; n++ {
		if err := decodeRequest(whole[:n], new(pb.SessionRequest)); err == nil {
			t.Errorf("a request cut to %d bytes decoded", n)
		}
	}
	for _, bad := range [][]byte{
		{0x10, 0x01},                         // batch as a varint
		{0x12, 0x02, 0x12, 0x05},             // frontend longer than the batch
		{0x0a, 0x03, 0x0a, 0x01, 0xff},       // database not UTF-8
		{0x12, 0x04, 0x22, 0x02, 0x1a, 0x05}, // param_oids longer than the statement
	} {
		if err := decodeRequest(bad, new(pb.SessionRequest)); err == nil {
			t.Errorf("request %x decoded", bad)
		}
	}
	if err := decodeResponse([]byte{0x2a, 0x01, 0xc3}, new(pb.SessionResponse)); err == nil {
		t.Error("an error code that is not UTF-8 decoded")
	}
}

// FuzzFrameCodec: decoding arbitrary frames never panics, and whatever
// decodes encodes to bytes that proto and the decoder read back alike.
func FuzzFrameCodec(f *testing.F) {
	// Small seeds only: the mutator slows to a crawl on large inputs.
	for _, r := range codecRequests() {
		if b := appendRequest(nil, r); len(b) < 1024 {
			f.Add(b, false)
		}
	}
	for _, r := range codecResponses() {
		if b := appendResponse(nil, r); len(b) < 1024 {
			f.Add(b, true)
		}
	}
	small := &pb.Batch{Mode: pb.Mode_SESSION, Frontend: []byte("S\x00\x00\x00\x04"), Settings: []*pb.Setting{{Name: "a", Value: "b"}},
		Prepared: []*pb.PreparedStatement{{Name: "s", Query: "q", ParamOids: []uint32{23, 25}}}, SameSettings: true, PreparedNames: []string{"n"}, PreparedReset: true}
	f.Add(appendRequest(nil, &pb.SessionRequest{Msg: &pb.SessionRequest_Batch{Batch: small}}), false)
	f.Fuzz(func(t *testing.T, frame []byte, response bool) {
		if response {
			var r pb.SessionResponse
			if decodeResponse(frame, &r) != nil {
				return
			}
			again := new(pb.SessionResponse)
			if err := proto.Unmarshal(appendResponse(nil, &r), again); err != nil || !proto.Equal(again, &r) {
				t.Fatalf("response %v re-encoded reads back as %v (%v)", &r, again, err)
			}
			return
		}
		var r pb.SessionRequest
		if decodeRequest(frame, &r) != nil {
			return
		}
		again := new(pb.SessionRequest)
		if err := proto.Unmarshal(appendRequest(nil, &r), again); err != nil || !proto.Equal(again, &r) {
			t.Fatalf("request %v re-encoded reads back as %v (%v)", &r, again, err)
		}
	})
}
