package activities

import (
	"errors"
	"testing"

	"go.temporal.io/sdk/temporal"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tesseradb/tessera/pgerr"
)

// TestEmptySQLStateDoesNotCrash: an error whose SQLSTATE is empty (a
// sidecar that sent none) used to panic on code[:2]; it is now a
// retryable XX000.
func TestEmptySQLStateDoesNotCrash(t *testing.T) {
	st, err := status.New(codes.Internal, "no code").WithDetails(&errdetails.ErrorInfo{Domain: "tessera.sidecar", Reason: ""})
	if err != nil {
		t.Fatal(err)
	}
	for name, got := range map[string]error{
		"sidecarError": sidecarError("fencing", "i", st.Err()),
		"passOn":       passOn(&pgerr.Error{Message: "no code"}),
	} {
		var appErr *temporal.ApplicationError
		if !errors.As(got, &appErr) || appErr.Type() != pgerr.InternalError || appErr.NonRetryable() {
			t.Errorf("%s: %v; want a retryable XX000", name, got)
		}
	}
	if final("") || final("4") {
		t.Error("a code without a class counted as final")
	}
}
