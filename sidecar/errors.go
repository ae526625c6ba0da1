package sidecar

import (
	"errors"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tesseradb/tessera/pgerr"
)

// errorDomain marks the ErrorInfo detail that carries a SQLSTATE.
const errorDomain = "tessera.sidecar"

// statusError turns an error into a gRPC status that carries its
// SQLSTATE, so a router or workflow can report it as Postgres would.
func statusError(err error) error {
	if err == nil {
		return nil
	}
	if _, ok := status.FromError(err); ok {
		return err
	}
	code := pgerr.Code(err)
	grpcCode := codes.Internal
	switch class := code[:2]; {
	case code == pgerr.ProtocolViolation || class == "22" || class == "42":
		grpcCode = codes.InvalidArgument
	case class == "08" || class == "57":
		grpcCode = codes.Unavailable
	case class == "0A":
		grpcCode = codes.Unimplemented
	case class == "55" || class == "25":
		grpcCode = codes.FailedPrecondition
	}
	st, derr := status.New(grpcCode, err.Error()).WithDetails(&errdetails.ErrorInfo{Domain: errorDomain, Reason: code})
	if derr != nil {
		return status.Error(grpcCode, err.Error())
	}
	return st.Err()
}

// ErrorFromStatus recovers the SQLSTATE error a sidecar sent; other errors
// (the sidecar unreachable, say) come back as connection failures, 08006.
func ErrorFromStatus(err error) error {
	if err == nil {
		return nil
	}
	st, ok := status.FromError(err)
	if !ok {
		return err
	}
	for _, d := range st.Details() {
		if info, ok := d.(*errdetails.ErrorInfo); ok && info.Domain == errorDomain {
			return &pgerr.Error{Code: info.Reason, Message: st.Message()}
		}
	}
	if st.Code() == codes.Unauthenticated {
		return &pgerr.Error{Code: "28000", Message: "sidecar refused the cluster credential"}
	}
	var pe *pgerr.Error
	if errors.As(err, &pe) {
		return pe
	}
	return &pgerr.Error{Code: "08006", Message: "sidecar: " + st.Message()}
}
