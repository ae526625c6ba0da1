package planner

import (
	"errors"
	"fmt"

	"github.com/pganalyze/pg_query_go/v6/parser"
	"github.com/tesseradb/tessera/pgerr"
)

// SQLSTATEs the planner uses beyond those pgerr names.
const (
	syntaxErrorCode      = "42601"
	undefinedParameter   = "42P02"
	notNullViolationCode = "23502"
)

// SyntaxError is a statement Postgres's parser refuses (SQLSTATE 42601).
// It wraps the *pgerr.Error the router sends, and adds the position the
// ErrorResponse's P field carries.
type SyntaxError struct {
	Err *pgerr.Error
	// Position is the 1-based character (not byte) position in the query
	// string where the parser stopped, 0 if unknown.
	Position int
}

func (e *SyntaxError) Error() string { return e.Err.Error() }

// SQLState is 42601.
func (e *SyntaxError) SQLState() string { return e.Err.Code }

// Unwrap gives errors.As access to the *pgerr.Error.
func (e *SyntaxError) Unwrap() error { return e.Err }

func syntaxError(err error) error {
	e := &SyntaxError{Err: &pgerr.Error{Code: syntaxErrorCode, Message: err.Error()}}
	var pe *parser.Error
	if errors.As(err, &pe) {
		e.Position = pe.Cursorpos
	}
	return e
}

// unsupported is SQLSTATE 0A000, what Tessera cannot route (yet).
func unsupported(format string, args ...any) error {
	return pgerr.New(pgerr.FeatureNotSupported, format, args...)
}

// crossShard is the error of a read that would need to combine the results
// of several shards in a way that plain concatenation does not.
func crossShard(what, where string) error {
	return unsupported("%s across shards is not supported yet (%s)", what, where)
}

func everyShard(group string) string {
	return fmt.Sprintf("the query reaches every shard of group %s", group)
}

func severalShards(group string) string {
	return fmt.Sprintf("its shard-key values reach more than one shard of group %s", group)
}

// joinNotOnShardKey names what a statement needs when its sharded tables'
// rows may pair across shards.
const joinNotOnShardKey = "a join not on the shard key"

func notRestricted(table TableName, group string) string {
	return fmt.Sprintf("%s is neither joined by its shard key to the rows the statement answers nor restricted to one shard of group %s by a shard-key value", table, group)
}
