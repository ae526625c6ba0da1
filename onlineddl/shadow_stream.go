package onlineddl

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pglogrepl"
	"github.com/jackc/pgx/v5"
	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/workflows"
)

// shadowStream is one direction's change stream within the shard's
// database: forward, the table's writes into the shadow; reverse (after
// the swap), the new table's writes into the old one. It is the
// replicator's Stream, with StreamTable.Into naming the other table.
type shadowStream struct {
	url     string
	n       shadowNames
	forward bool
}

// run runs the stream until stopAt or the message (either may be zero),
// or ctx ends.
func (s shadowStream) run(ctx context.Context, stopAt pglogrepl.LSN, msg replicator.LogicalMessage) error {
	st, closeConns, err := s.build(ctx, stopAt, msg)
	if err != nil {
		return err
	}
	defer closeConns()
	return st.Run(ctx)
}

// build makes the stream, with a target connection of its own (the
// stream binds it to its replication origin), closed by closeConns.
func (s shadowStream) build(ctx context.Context, stopAt pglogrepl.LSN, msg replicator.LogicalMessage) (st *replicator.Stream, closeConns func(), err error) {
	src, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return nil, nil, err
	}
	defer src.Close(context.WithoutCancel(ctx))
	// Forward, the table is read under its name and applied into the
	// shadow; reverse, the swap has given the shadow the table's name and
	// the old table its own.
	into := s.n.old
	if s.forward {
		into = s.n.shadow
	}
	t, err := replicator.DescribeTable(ctx, src, s.n.schema, s.n.table, "")
	if err != nil {
		return nil, nil, err
	}
	it, err := intoTable(ctx, src, s.n.schema, into)
	if err != nil {
		return nil, nil, err
	}
	target, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return nil, nil, err
	}
	st = &replicator.Stream{
		Workflow: s.n.tag, Source: direction(s.forward), SourceConnString: s.url,
		Slot: s.n.slot(s.forward), Publication: s.n.publication(s.forward),
		Tables:         []replicator.StreamTable{{Table: t, Into: it}},
		Targets:        []replicator.Target{{Shard: "t", Conn: target}},
		StopAt:         stopAt,
		StopAtMessage:  msg,
		StatusInterval: 50 * time.Millisecond,
		// The other direction's applier wrote through its origin: its
		// writes are the ones this stream's source already holds.
		SkipOriginPrefix: replicator.OriginName(s.n.tag, direction(!s.forward), ""),
	}
	return st, func() { target.Close(context.WithoutCancel(ctx)) }, nil
}

// running is a stream run in the background until its marker.
type running struct {
	st     *replicator.Stream
	done   chan error
	cancel context.CancelFunc
}

// start runs the stream in the background until it applies msg. A
// stream restarted under the swap's lock would first decode, from its
// slot's restart position, everything since: one run carries the
// catch-up and the marker both.
func (s shadowStream) start(ctx context.Context, msg replicator.LogicalMessage) (*running, error) {
	st, closeConns, err := s.build(ctx, 0, msg)
	if err != nil {
		return nil, err
	}
	rctx, cancel := context.WithCancel(ctx)
	r := &running{st: st, done: make(chan error, 1), cancel: cancel}
	go func() {
		err := st.Run(rctx)
		closeConns()
		r.done <- err
	}()
	return r, nil
}

// stop ends the run, if it has not ended, and returns its error.
func (r *running) stop() error {
	r.cancel()
	return <-r.done
}

// catchUp waits until the stream has applied the source's WAL position,
// again while a round takes longer than catchUpRound, so that the swap's
// lock waits for few transactions.
func (r *running) catchUp(ctx context.Context, conn *pgx.Conn) error {
	for round := 1; ; round++ {
		var lsn pglogrepl.LSN
		if err := conn.QueryRow(ctx, "SELECT pg_current_wal_lsn()").Scan(&lsn); err != nil {
			return err
		}
		start := time.Now()
		for r.st.Applied() < lsn {
			select {
			case err := <-r.done:
				r.done <- err
				if err == nil {
					err = pgerr.New(pgerr.InternalError, "the stream stopped before its marker")
				}
				return err
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(5 * time.Millisecond):
			}
		}
		// Under steady writes a round never ends at once: a batch
		// applies every 100 ms at least. After catchUpRounds the stream
		// is as close as it gets; what is left, it applies under the
		// lock.
		took := time.Since(start)
		switch {
		case took < catchUpRound:
			slog.Debug("shadow stream caught up", "rounds", round, "last", took)
			return nil
		case round >= catchUpRounds && took < catchUpBehind:
			slog.Debug("shadow stream as close as it gets", "rounds", round, "last", took)
			return nil
		case round >= catchUpRounds:
			// Locking now would pause the table's writers for as long as
			// the stream needs to apply its backlog: the attempt ends,
			// nothing changed, and the workflow retries it later.
			return temporal.NewApplicationError(fmt.Sprintf(
				"the stream does not keep up with the table's writes (its last catch-up round took %s): the swap is not attempted", took.Round(time.Millisecond)),
				pgerr.QueryCanceled)
		}
	}
}

// catchUpRound: a catch-up round shorter than this leaves so little that
// the swap may take its lock.
const (
	catchUpRound  = 500 * time.Millisecond
	catchUpRounds = 20
	// catchUpBehind: a stream whose rounds still take this long after
	// catchUpRounds is too far behind to take the lock.
	catchUpBehind = 2 * time.Second
)

// StreamShadow keeps the old table current after the swap: it runs the
// reverse stream (the new table's writes, cast back to the old types,
// into the old table) until it is cancelled, heartbeating. Revert stops
// it and applies the rest itself.
func (a *Activities) StreamShadow(ctx context.Context, in workflows.ShadowInput) error {
	conn, n, rec, err := a.shadowStep(ctx, in)
	if err != nil {
		return activityError(err)
	}
	conn.Close(context.WithoutCancel(ctx))
	if rec == nil || rec.state != workflows.ShadowSwapped {
		return refuse(pgerr.ObjectNotInPrerequisiteState, "shard %s: no swapped shadow table to stream back from", in.Shard)
	}
	url, err := a.Conn.ConnString(ctx, in.Shard, in.Database)
	if err != nil {
		return activityError(err)
	}
	stop := beatEvery(ctx, 5*time.Second, func() any { return nil })
	defer stop()
	err = shadowStream{url: url, n: n}.run(ctx, 0, replicator.LogicalMessage{})
	if errors.Is(err, context.Canceled) || ctx.Err() != nil {
		return ctx.Err()
	}
	return activityError(fmt.Errorf("shard %s: reverse stream: %w", in.Shard, err))
}
