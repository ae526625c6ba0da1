// Package pgerr defines Tessera's errors that carry a Postgres SQLSTATE, so
// that whatever layer finds a problem (topology, routing, protocol) can hand
// the client the same kind of error Postgres itself would send.
package pgerr

import (
	"errors"
	"fmt"
)

// SQLSTATE codes used across Tessera. Names follow Postgres's errcodes.txt.
const (
	FeatureNotSupported          = "0A000"
	InvalidParameterValue        = "22023"
	InvalidTextRepresentation    = "22P02"
	InvalidBinaryRepresention    = "22P03"
	NumericValueOutOfRange       = "22003"
	InvalidDatetimeFormat        = "22007"
	DatatypeMismatch             = "42804"
	UndefinedObject              = "42704"
	ProtocolViolation            = "08P01"
	CheckViolation               = "23514"
	SerializationFailure         = "40001"
	ObjectNotInPrerequisiteState = "55000"
	// ObjectInUse: another operation holds the shard or table (a
	// switchover asked during a cutover, a second online migration of a
	// table); retried, it may pass.
	ObjectInUse   = "55006"
	QueryCanceled = "57014"
	InternalError = "XX000"
	DataCorrupted = "XX001"
	// ConfigFileError is what Postgres uses for a bad configuration file; a
	// bad data topology is the same kind of problem.
	ConfigFileError = "F0000"
	// ReadOnlySQLTransaction is what a fenced table's trigger raises.
	ReadOnlySQLTransaction = "25006"
	// ActiveSQLTransaction: what must run outside a transaction block was
	// sent inside one.
	ActiveSQLTransaction = "25001"
)

// CutoverFencePrefix begins the message of the error (SQLSTATE
// ReadOnlySQLTransaction) that a cutover's fence trigger raises for a
// write to a table that is moving or has moved to other shards:
// "cutover fence: table public.orders has moved to other shards". A
// router that sees it knows the write did not run and its topology is
// about to change (or already has), so it holds the statement and plans
// it again instead of failing it; the prefix is the contract between the
// replicator, which writes the trigger, and the router.
const CutoverFencePrefix = "cutover fence: "

// Error is an error with a SQLSTATE, a message and an optional detail, the
// fields of a Postgres ErrorResponse that Tessera fills.
type Error struct {
	Code    string
	Message string
	Detail  string
}

func (e *Error) Error() string {
	if e.Detail != "" {
		return e.Message + " (" + e.Detail + ")"
	}
	return e.Message
}

// New returns an Error with the given SQLSTATE and a formatted message.
func New(code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...)}
}

// Coded is implemented by error types that carry a SQLSTATE without being
// an *Error (a topology ValidationError, say).
type Coded interface {
	SQLState() string
}

// SQLState makes *Error a Coded.
func (e *Error) SQLState() string { return e.Code }

// Code returns the SQLSTATE carried by err or anything it wraps, or
// InternalError when none does: an error without a code is Tessera's own
// fault.
func Code(err error) string {
	// The fast paths keep the hot path (Code of nil, or of an unwrapped
	// error) from allocating: errors.As moves its target to the heap.
	if err == nil {
		return InternalError
	}
	if c, ok := err.(Coded); ok {
		return c.SQLState()
	}
	var c Coded
	if errors.As(err, &c) {
		return c.SQLState()
	}
	return InternalError
}
