package activities

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/sidecar"
)

// SQLSTATEs used here that package pgerr does not name.
const (
	invalidParameter  = pgerr.InvalidParameterValue
	notInState        = pgerr.ObjectNotInPrerequisiteState
	undefinedObject   = pgerr.UndefinedObject
	connectionFailure = "08006"
	// queryCanceled is what a wait that ran out of time reports, as a
	// statement_timeout would.
	queryCanceled = "57014"
)

// Activity and workflow failures are Temporal application errors whose
// Type is the SQLSTATE, so that whoever started a workflow can report the
// failure as Postgres would (errors.As to *temporal.ApplicationError, then
// Type()).

// Refuse is a failure that retrying cannot cure: bad input, or a shard in
// a state the operation does not apply to.
func Refuse(code, format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...), code, nil)
}

// failure is a failure that may pass (an instance restarting, a network
// blip); Temporal retries the activity under its retry policy.
func failure(code, format string, args ...any) error {
	return temporal.NewApplicationError(fmt.Sprintf(format, args...), code)
}

// final reports whether a failure with this SQLSTATE would fail again:
// invalid input, and refused credentials. A code too short to have a
// class (a sidecar or an error that sent none) is not known to be final.
func final(code string) bool {
	if len(code) < 2 {
		return false
	}
	switch code[:2] {
	case "22", "42", "0A", "28":
		return true
	}
	return false
}

// passOn turns an error from the topology service or a check into an
// activity failure: application errors pass as they are, errors final by
// their SQLSTATE are not retried, anything else (etcd unavailable, say)
// is.
func passOn(err error) error {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return err
	}
	code := sqlState(err)
	if final(code) {
		return Refuse(code, "%v", err)
	}
	return failure(code, "%v", err)
}

// sidecarError turns what a sidecar RPC returned into an activity failure
// that keeps the SQLSTATE. Invalid requests and refused credentials are
// final; anything else (unreachable, Postgres restarting, a lock) is
// retried.
func sidecarError(op, instance string, err error) error {
	err = sidecar.ErrorFromStatus(err)
	code := sqlState(err)
	msg := fmt.Sprintf("%s %s: %v", op, instance, err)
	if final(code) {
		return temporal.NewNonRetryableApplicationError(msg, code, nil)
	}
	return temporal.NewApplicationError(msg, code)
}

// sqlState is err's SQLSTATE; an error that carries an empty one (a
// sidecar that sent none) gets XX000, so that every failure has one.
func sqlState(err error) string {
	if code := pgerr.Code(err); code != "" {
		return code
	}
	return pgerr.InternalError
}
