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
	// Quiet, when set, is how long no client statement may have run on
	// the instance before the drain counts it as drained (quietness).
	Quiet time.Duration
}

// openTransactions counts the client transactions open on an instance,
// its own query's excepted, and says how many milliseconds ago a client
// backend last started or ended a statement (state_change, by the
// instance's own clock; a large number when none has). Routers keep a
// transaction's backend for the whole transaction, so an
// idle-in-transaction session counts. pgmanager's own status queries
// (application_name pgmanager, polled every second by the sidecar's
// health loop) are not clients' work: counted, they made a drain see a
// transaction in about one poll in 300. Nor are the drain's own earlier
// polls, which the sidecar may have run on other pooled backends: each
// would look like a statement just run; they are told by their text.
const openTransactions = `/* tessera drain */ SELECT count(*) FILTER (WHERE xact_start IS NOT NULL),
  COALESCE(floor(EXTRACT(epoch FROM clock_timestamp() - max(state_change)) * 1000), 1000000000)::bigint
FROM pg_catalog.pg_stat_activity
WHERE backend_type = 'client backend' AND pid <> pg_backend_pid()
  AND application_name IS DISTINCT FROM 'pgmanager'
  AND query NOT LIKE '/* tessera drain */%'`

// DrainTransactions waits, up to in.Wait, until no client transaction is
// open on the instance and, when in.Quiet is set, no client statement has
// run there for in.Quiet, and returns how many transactions were still
// open when it stopped waiting. A switchover calls it once it has set the
// buffer signal and before it fences the old primary, which ends every
// session: transactions that were under way then finish instead of
// failing. The quiet time covers routers that have not seen the signal
// yet: their statements still reach the instance, and would be ended by
// the fence or refused by the fenced sidecar (57P03, which a router
// buffers only when its quiet time between episodes allows it). On an
// idle instance it adds nothing.
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
		row, err := integersFrom(answer, 2)
		if err != nil {
			return 0, failure(connectionFailure, "counting open transactions on %s: %v", in.Instance, err)
		}
		open, quietFor := int(row[0]), time.Duration(row[1])*time.Millisecond
		activity.RecordHeartbeat(ctx, open)
		if (open == 0 && quietFor >= in.Quiet) || !time.Now().Before(deadline) {
			return open, nil
		}
		select {
		case <-ctx.Done():
			return open, ctx.Err()
		case <-time.After(drainPoll):
		}
	}
}

// drainPoll is how often DrainTransactions looks again.
const drainPoll = 10 * time.Millisecond

var errMalformedRow = errors.New("the answer is not one row of integers")

// integersFrom reads the n integers of a one-row answer, or its error.
func integersFrom(answer []byte, n int) ([]int64, error) {
	var row []int64
	var firstErr error
	err := pgwire.Messages(answer, func(typ byte, msg []byte) error {
		switch typ {
		case 'E':
			if firstErr == nil {
				firstErr = pgwire.ParseError(msg)
			}
		case 'D':
			// Type, length, column count, then each value's length
			// and value.
			if row != nil || len(msg) < 7 || int(binary.BigEndian.Uint16(msg[5:])) != n {
				return errMalformedRow
			}
			rest := msg[7:]
			for range n {
				if len(rest) < 4 {
					return errMalformedRow
				}
				size := int(int32(binary.BigEndian.Uint32(rest)))
				if size < 0 || 4+size > len(rest) {
					return errMalformedRow
				}
				v, err := strconv.ParseInt(string(rest[4:4+size]), 10, 64)
				if err != nil {
					return err
				}
				row = append(row, v)
				rest = rest[4+size:]
			}
		}
		return nil
	})
	switch {
	case err != nil:
		return nil, err
	case firstErr != nil:
		return nil, firstErr
	case row == nil:
		return nil, errMalformedRow
	}
	return row, nil
}
