package sidecar

import (
	"errors"
	"unicode/utf8"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"

	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// The framed session port's per-batch messages, SessionRequest and
// SessionResponse, are encoded here by hand: the same protobuf bytes
// proto.Marshal makes (the tests compare), without reflection and
// without allocating per field. Every batch crosses this code twice on
// each side, so it is on the hot path; the handshake uses proto.

// Field numbers, as in sidecar.proto.
const (
	fieldRequestOpen  = 1
	fieldRequestBatch = 2

	fieldOpenDatabase    = 1
	fieldOpenUser        = 2
	fieldOpenCancelToken = 3

	fieldBatchMode          = 1
	fieldBatchFrontend      = 2
	fieldBatchSettings      = 3
	fieldBatchPrepared      = 4
	fieldBatchSameSettings  = 5
	fieldBatchPreparedNames = 6
	fieldBatchPreparedReset = 7
	fieldBatchAutocommit    = 8

	fieldSettingName  = 1
	fieldSettingValue = 2

	fieldPreparedName      = 1
	fieldPreparedQuery     = 2
	fieldPreparedParamOids = 3

	fieldResponseBackend      = 1
	fieldResponseDone         = 2
	fieldResponseTxStatus     = 3
	fieldResponseCopyIn       = 4
	fieldResponseErrorCode    = 5
	fieldResponseErrorMessage = 6
	fieldResponseAsync        = 7
)

var errBadFrame = errors.New("malformed frame")

// unknownField is what a field decoder returns for a field it does not
// know, to have it skipped; any other negative result is an error.
const unknownField = -1 << 30

// badField is what a field decoder returns for a value of the wrong type.
const badField = -2

func validUTF8(b []byte) bool { return utf8.Valid(b) }

func appendBytesField(b []byte, num protowire.Number, v []byte) []byte {
	if len(v) == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendBytes(b, v)
}

func appendStringField(b []byte, num protowire.Number, v string) []byte {
	if v == "" {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.BytesType)
	return protowire.AppendString(b, v)
}

func appendVarintField(b []byte, num protowire.Number, v uint64) []byte {
	if v == 0 {
		return b
	}
	b = protowire.AppendTag(b, num, protowire.VarintType)
	return protowire.AppendVarint(b, v)
}

func appendBoolField(b []byte, num protowire.Number, v bool) []byte {
	if !v {
		return b
	}
	return appendVarintField(b, num, 1)
}

// appendMessage appends field num holding the message body encodes.
func appendMessage(b []byte, num protowire.Number, body func([]byte) []byte) []byte {
	b = protowire.AppendTag(b, num, protowire.BytesType)
	// Leave one byte for the length, the usual case, and move the body
	// when the length needs more.
	at := len(b)
	b = append(b, 0)
	b = body(b)
	n := len(b) - at - 1
	if size := protowire.SizeVarint(uint64(n)); size > 1 {
		b = append(b, make([]byte, size-1)...)
		copy(b[at+size:], b[at+1:at+1+n])
	}
	protowire.AppendVarint(b[:at], uint64(n))
	return b
}

// appendRequest appends r's encoding.
func appendRequest(b []byte, r *pb.SessionRequest) []byte {
	switch m := r.Msg.(type) {
	case *pb.SessionRequest_Open:
		if m.Open == nil {
			return protowire.AppendBytes(protowire.AppendTag(b, fieldRequestOpen, protowire.BytesType), nil)
		}
		return appendMessage(b, fieldRequestOpen, func(b []byte) []byte {
			b = appendStringField(b, fieldOpenDatabase, m.Open.Database)
			b = appendStringField(b, fieldOpenUser, m.Open.User)
			return appendStringField(b, fieldOpenCancelToken, m.Open.CancelToken)
		})
	case *pb.SessionRequest_Batch:
		if m.Batch == nil {
			return protowire.AppendBytes(protowire.AppendTag(b, fieldRequestBatch, protowire.BytesType), nil)
		}
		return appendMessage(b, fieldRequestBatch, func(b []byte) []byte { return appendBatch(b, m.Batch) })
	}
	return b
}

func appendBatch(b []byte, x *pb.Batch) []byte {
	b = appendVarintField(b, fieldBatchMode, uint64(int64(x.Mode)))
	b = appendBytesField(b, fieldBatchFrontend, x.Frontend)
	for _, s := range x.Settings {
		b = appendMessage(b, fieldBatchSettings, func(b []byte) []byte {
			b = appendStringField(b, fieldSettingName, s.Name)
			return appendStringField(b, fieldSettingValue, s.Value)
		})
	}
	for _, ps := range x.Prepared {
		b = appendMessage(b, fieldBatchPrepared, func(b []byte) []byte {
			b = appendStringField(b, fieldPreparedName, ps.Name)
			b = appendStringField(b, fieldPreparedQuery, ps.Query)
			if len(ps.ParamOids) == 0 {
				return b
			}
			return appendMessage(b, fieldPreparedParamOids, func(b []byte) []byte {
				for _, oid := range ps.ParamOids {
					b = protowire.AppendVarint(b, uint64(oid))
				}
				return b
			})
		})
	}
	b = appendBoolField(b, fieldBatchSameSettings, x.SameSettings)
	for _, name := range x.PreparedNames {
		b = protowire.AppendTag(b, fieldBatchPreparedNames, protowire.BytesType)
		b = protowire.AppendString(b, name)
	}
	b = appendBoolField(b, fieldBatchPreparedReset, x.PreparedReset)
	return appendBoolField(b, fieldBatchAutocommit, x.Autocommit)
}

// appendResponse appends r's encoding.
func appendResponse(b []byte, r *pb.SessionResponse) []byte {
	b = appendBytesField(b, fieldResponseBackend, r.Backend)
	b = appendBoolField(b, fieldResponseDone, r.Done)
	b = appendVarintField(b, fieldResponseTxStatus, uint64(int64(r.TxStatus)))
	b = appendBoolField(b, fieldResponseCopyIn, r.CopyIn)
	b = appendStringField(b, fieldResponseErrorCode, r.ErrorCode)
	b = appendStringField(b, fieldResponseErrorMessage, r.ErrorMessage)
	return appendBoolField(b, fieldResponseAsync, r.Async)
}

// fields calls fn for each field of the encoded message b; fn returns
// how much of the value it consumed, unknownField to have it skipped, or
// another negative number for a malformed value.
func fields(b []byte, fn func(num protowire.Number, typ protowire.Type, v []byte) int) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return errBadFrame
		}
		b = b[n:]
		used := fn(num, typ, b)
		if used == unknownField {
			used = protowire.ConsumeFieldValue(num, typ, b)
		}
		if used < 0 {
			return errBadFrame
		}
		b = b[used:]
	}
	return nil
}

// bytesValue consumes a length-delimited value of the expected type.
func bytesValue(typ protowire.Type, b []byte, out *[]byte) int {
	if typ != protowire.BytesType {
		return badField
	}
	v, n := protowire.ConsumeBytes(b)
	if n >= 0 {
		*out = v
	}
	return n
}

func varintValue(typ protowire.Type, b []byte, out *uint64) int {
	if typ != protowire.VarintType {
		return badField
	}
	v, n := protowire.ConsumeVarint(b)
	if n >= 0 {
		*out = v
	}
	return n
}

func boolValue(typ protowire.Type, b []byte, out *bool) int {
	var u uint64
	n := varintValue(typ, b, &u)
	*out = u != 0
	return n
}

// decodeRequest decodes b into r, copying byte fields.
func decodeRequest(b []byte, r *pb.SessionRequest) error {
	return decodeRequestInto(b, r, nil, false)
}

// decodeRequestInto decodes b into r. A batch is decoded into reuse when
// it is not nil, keeping the arrays of its Prepared and PreparedNames (not
// of Settings, which a session keeps); with alias, its Frontend is a
// slice of b and its PreparedNames point into b rather than copy it.
func decodeRequestInto(b []byte, r *pb.SessionRequest, reuse *pb.SessionRequest_Batch, alias bool) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) int {
		var body []byte
		switch num {
		case fieldRequestOpen:
			n := bytesValue(typ, v, &body)
			if n < 0 {
				return n
			}
			open := &pb.Open{}
			if decodeOpen(body, open) != nil {
				return badField
			}
			r.Msg = &pb.SessionRequest_Open{Open: open}
			return n
		case fieldRequestBatch:
			n := bytesValue(typ, v, &body)
			if n < 0 {
				return n
			}
			if reuse == nil {
				reuse = &pb.SessionRequest_Batch{}
			}
			batch := reuse.Batch
			if batch == nil {
				batch = &pb.Batch{}
			} else {
				clear(batch.Prepared)
				prepared, names := batch.Prepared[:0], batch.PreparedNames[:0]
				batch.Reset()
				batch.Prepared, batch.PreparedNames = prepared, names
			}
			if decodeBatch(body, batch, alias) != nil {
				return badField
			}
			reuse.Batch = batch
			r.Msg = reuse
			return n
		}
		return unknownField
	})
}

// stringValue consumes a string field, which protobuf requires to be
// valid UTF-8, as proto.Unmarshal checks.
func stringValue(typ protowire.Type, b []byte, out *string) int {
	var raw []byte
	n := bytesValue(typ, b, &raw)
	if n >= 0 {
		if !validUTF8(raw) {
			return badField
		}
		*out = string(raw)
	}
	return n
}

func decodeOpen(b []byte, o *pb.Open) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) int {
		switch num {
		case fieldOpenDatabase:
			return stringValue(typ, v, &o.Database)
		case fieldOpenUser:
			return stringValue(typ, v, &o.User)
		case fieldOpenCancelToken:
			return stringValue(typ, v, &o.CancelToken)
		}
		return unknownField
	})
}

func decodeBatch(b []byte, x *pb.Batch, alias bool) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) int {
		var u uint64
		var body []byte
		switch num {
		case fieldBatchMode:
			n := varintValue(typ, v, &u)
			x.Mode = pb.Mode(int32(u))
			return n
		case fieldBatchFrontend:
			n := bytesValue(typ, v, &body)
			if n >= 0 {
				if alias {
					x.Frontend = body
				} else {
					x.Frontend = append([]byte(nil), body...)
				}
			}
			return n
		case fieldBatchSettings:
			n := bytesValue(typ, v, &body)
			if n < 0 {
				return n
			}
			s := &pb.Setting{}
			err := fields(body, func(num protowire.Number, typ protowire.Type, v []byte) int {
				switch num {
				case fieldSettingName:
					return stringValue(typ, v, &s.Name)
				case fieldSettingValue:
					return stringValue(typ, v, &s.Value)
				}
				return unknownField
			})
			if err != nil {
				return badField
			}
			x.Settings = append(x.Settings, s)
			return n
		case fieldBatchPrepared:
			n := bytesValue(typ, v, &body)
			if n < 0 {
				return n
			}
			ps := &pb.PreparedStatement{}
			if decodePrepared(body, ps) != nil {
				return badField
			}
			x.Prepared = append(x.Prepared, ps)
			return n
		case fieldBatchSameSettings:
			return boolValue(typ, v, &x.SameSettings)
		case fieldBatchPreparedNames:
			var name string
			var n int
			if alias {
				// Names only look statements up (session.resolve) before
				// the next frame: no copy.
				var raw []byte
				if n = bytesValue(typ, v, &raw); n >= 0 && !validUTF8(raw) {
					return badField
				}
				name = unsafe.String(unsafe.SliceData(raw), len(raw))
			} else {
				n = stringValue(typ, v, &name)
			}
			if n >= 0 {
				x.PreparedNames = append(x.PreparedNames, name)
			}
			return n
		case fieldBatchPreparedReset:
			return boolValue(typ, v, &x.PreparedReset)
		case fieldBatchAutocommit:
			return boolValue(typ, v, &x.Autocommit)
		}
		return unknownField
	})
}

func decodePrepared(b []byte, ps *pb.PreparedStatement) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) int {
		switch num {
		case fieldPreparedName:
			return stringValue(typ, v, &ps.Name)
		case fieldPreparedQuery:
			return stringValue(typ, v, &ps.Query)
		case fieldPreparedParamOids:
			if typ == protowire.VarintType { // unpacked, which decoders must accept
				var u uint64
				n := varintValue(typ, v, &u)
				ps.ParamOids = append(ps.ParamOids, uint32(u))
				return n
			}
			var packed []byte
			n := bytesValue(typ, v, &packed)
			for n >= 0 && len(packed) > 0 {
				u, m := protowire.ConsumeVarint(packed)
				if m < 0 {
					return badField
				}
				ps.ParamOids = append(ps.ParamOids, uint32(u))
				packed = packed[m:]
			}
			return n
		}
		return unknownField
	})
}

// decodeResponse decodes b into r, copying the backend bytes.
func decodeResponse(b []byte, r *pb.SessionResponse) error {
	return decodeResponseAlias(b, r, false)
}

// decodeResponseAlias decodes b into r; with alias, r.Backend is a slice
// of b.
func decodeResponseAlias(b []byte, r *pb.SessionResponse, alias bool) error {
	return fields(b, func(num protowire.Number, typ protowire.Type, v []byte) int {
		var u uint64
		var body []byte
		switch num {
		case fieldResponseBackend:
			n := bytesValue(typ, v, &body)
			if n >= 0 {
				if alias {
					r.Backend = body
				} else {
					r.Backend = append([]byte(nil), body...)
				}
			}
			return n
		case fieldResponseDone:
			return boolValue(typ, v, &r.Done)
		case fieldResponseTxStatus:
			n := varintValue(typ, v, &u)
			r.TxStatus = pb.TxStatus(int32(u))
			return n
		case fieldResponseCopyIn:
			return boolValue(typ, v, &r.CopyIn)
		case fieldResponseErrorCode:
			return stringValue(typ, v, &r.ErrorCode)
		case fieldResponseErrorMessage:
			return stringValue(typ, v, &r.ErrorMessage)
		case fieldResponseAsync:
			return boolValue(typ, v, &r.Async)
		}
		return unknownField
	})
}
