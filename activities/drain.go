package activities

import (
	"context"
	"encoding/binary"
	"errors"
	"strconv"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/tesseradb/tessera/pgwire"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// DrainInput asks DrainTransactions to wait on one instance.
type DrainInput struct {
	Shard    string
	Instance string
	// Wait bounds the wait.
	Wait time.Duration
}

// openTransactions counts the client transactions open on an instance,
// its own query's excepted. Routers keep a transaction's backend for the
// whole transaction, so an idle-in-transaction session counts. pgmanager's
// own status queries (application_name pgmanager, polled every second by
// the sidecar's health loop) are not clients' work: counted, they made a
// drain see a transaction in about one poll in 300.
const openTransactions = `SELECT count(*) FROM pg_catalog.pg_stat_activity
WHERE backend_type = 'client backend' AND xact_start IS NOT NULL AND pid <> pg_backend_pid()
  AND application_name IS DISTINCT FROM 'pgmanager'`

// DrainTransactions waits, up to in.Wait, until no client transaction is
// open on the instance, and returns how many still were when it stopped
// waiting. A switchover calls it once routers hold the shard's new
// statements and before it fences the old primary, which ends every
// session: transactions that were under way then finish instead of
// failing.
func (a *Activities) DrainTransactions(ctx context.Context, in DrainInput) (int, error) {
	defer heartbeating(ctx)()
	_, c, err := a.dial(ctx, in.Shard, in.Instance)
	if err != nil {
		return 0, err
	}
	sess, err := c.OpenSession(ctx, "postgres", "postgres")
	if err != nil {
		return 0, sidecarError("opening a session on", in.Instance, err)
	}
	defer sess.Close()
	query := pgwire.AppendQuery(nil, openTransactions)
	deadline := time.Now().Add(in.Wait)
	for {
		var answer []byte
		if _, err := sess.Run(&pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: query}, func(b []byte) error {
			answer = append(answer, b...)
			return nil
		}); err != nil {
			return 0, sidecarError("counting open transactions on", in.Instance, err)
		}
		open, err := countFrom(answer)
		if err != nil {
			return 0, failure(connectionFailure, "counting open transactions on %s: %v", in.Instance, err)
		}
		activity.RecordHeartbeat(ctx, open)
		if open == 0 || !time.Now().Before(deadline) {
			return open, nil
		}
		select {
		case <-ctx.Done():
			return open, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

var errMalformedRow = errors.New("the answer is not one row with one integer")

// countFrom reads the single integer of a one-row answer, or its error.
func countFrom(answer []byte) (int, error) {
	n, found := 0, false
	var firstErr error
	err := pgwire.Messages(answer, func(typ byte, msg []byte) error {
		switch typ {
		case 'E':
			if firstErr == nil {
				firstErr = pgwire.ParseError(msg)
			}
		case 'D':
			// Type, length, column count (1), value length, value.
			if len(msg) < 11 || binary.BigEndian.Uint16(msg[5:]) != 1 {
				return errMalformedRow
			}
			size := int(int32(binary.BigEndian.Uint32(msg[7:])))
			if size < 0 || 11+size > len(msg) {
				return errMalformedRow
			}
			v, err := strconv.Atoi(string(msg[11 : 11+size]))
			if err != nil {
				return err
			}
			n, found = v, true
		}
		return nil
	})
	switch {
	case err != nil:
		return 0, err
	case firstErr != nil:
		return 0, firstErr
	case !found:
		return 0, errMalformedRow
	}
	return n, nil
}
