package workflows

import (
	"errors"
	"fmt"

	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/pgerr"
)

// queryCanceled is the SQLSTATE of a step that ran out of time.
const queryCanceled = "57014"

// failed is how a workflow reports a step's failure: a non-retryable
// application error whose message says what the workflow was doing and
// why the step failed, and whose Type is the SQLSTATE the step's activity
// reported (see package activities), so callers find the code at the top
// of the error chain rather than under Temporal's wrappers.
func failed(err error, format string, args ...any) error {
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf(format, args...)+": "+errText(err), sqlState(err), err)
}

func sqlState(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) && isSQLState(appErr.Type()) {
		return appErr.Type()
	}
	if IsSourceFailover(err) {
		return pgerr.ObjectNotInPrerequisiteState
	}
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) {
		return queryCanceled
	}
	return pgerr.InternalError
}

func isSQLState(s string) bool {
	if len(s) != 5 {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && (c < 'A' || c > 'Z') {
			return false
		}
	}
	return true
}

// errText is why a step failed, without Temporal's wrapping.
func errText(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	var timeout *temporal.TimeoutError
	if errors.As(err, &timeout) {
		return "timed out"
	}
	return err.Error()
}
