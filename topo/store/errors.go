package store

import (
	"errors"
	"fmt"
	"strings"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo"
)

// ErrNoTopology means no topology document is stored for the cluster. To a
// client it is a configuration error: the cluster has not been set up.
var ErrNoTopology = &pgerr.Error{Code: pgerr.ConfigFileError, Message: "no data topology is stored"}

// ErrClosed is returned by a Watcher or Registration used after Close.
var ErrClosed = errors.New("store: closed")

// RevisionMismatchError refuses a compare-and-swap write because the
// stored topology is not at the revision the writer read.
type RevisionMismatchError struct {
	Expected int64
	Actual   int64 // 0 when none is stored
}

// SQLState reports a lost compare-and-swap race as a serialization
// failure: read the topology again and retry.
func (e *RevisionMismatchError) SQLState() string { return pgerr.SerializationFailure }

func (e *RevisionMismatchError) Error() string {
	switch {
	case e.Actual == 0:
		return fmt.Sprintf("expected topology revision %d, but no topology is stored", e.Expected)
	case e.Expected == 0:
		return fmt.Sprintf("expected no topology to be stored, but one is, at revision %d", e.Actual)
	}
	return fmt.Sprintf("expected topology revision %d, but the stored topology is at revision %d", e.Expected, e.Actual)
}

// PlacementChangeError refuses a topology that would move tables' rows to
// other shards without moving the rows.
type PlacementChangeError struct {
	Changes []topo.Change
}

func (e *PlacementChangeError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "the new topology changes the placement of %d table(s), which would strand their rows:", len(e.Changes))
	for _, c := range e.Changes {
		b.WriteString("\n  ")
		b.WriteString(c.String())
	}
	b.WriteString("\nmove the data with a data-movement workflow, which applies the topology with force")
	return b.String()
}

// SQLState says the cluster is not in a state to take the change: the rows
// must move first, which only data-movement workflows do.
func (e *PlacementChangeError) SQLState() string { return pgerr.ObjectNotInPrerequisiteState }

// InvalidTopologyError is a stored topology document that does not parse,
// most likely written to etcd by hand. Err is usually a
// *topo.ValidationError.
type InvalidTopologyError struct {
	Key      string
	Revision int64
	Err      error
}

func (e *InvalidTopologyError) Error() string {
	return fmt.Sprintf("stored topology %s at revision %d is invalid: %v", e.Key, e.Revision, e.Err)
}

// Unwrap returns the reason the document does not parse.
func (e *InvalidTopologyError) Unwrap() error { return e.Err }

// SQLState makes a bad stored topology a configuration error to a client.
func (e *InvalidTopologyError) SQLState() string { return pgerr.ConfigFileError }
