package admin

import (
	"context"
	"time"

	"go.etcd.io/etcd/client/v3/concurrency"
)

// LeaderKey returns the etcd election prefix for a cluster's recovery
// leadership.
func LeaderKey(cluster string) string { return "/tessera/" + cluster + "/admin/leader" }

// campaign holds recovery leadership whenever it can, until ctx ends.
// Leadership lives on an etcd session (a lease kept alive): when the
// session is lost, because this admin was cut off from etcd for longer
// than SessionTTL, it steps down at once, and etcd, having expired the
// lease, lets another admin win.
func (a *Admin) campaign(ctx context.Context) {
	ttl := int(a.cfg.SessionTTL.Round(time.Second) / time.Second)
	for ctx.Err() == nil {
		cli := a.cfg.Store.Client()
		lease, err := cli.Grant(ctx, int64(ttl))
		if err != nil {
			if ctx.Err() == nil {
				a.log.Warn("cannot open an etcd session; retrying", "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		// The session's context is not ctx: Close must still be able to
		// revoke the lease after ctx ends, so that a successor takes
		// over at once rather than a TTL later. (Close bounds the
		// revoke by the TTL.)
		s, err := concurrency.NewSession(cli, concurrency.WithLease(lease.ID), concurrency.WithTTL(ttl),
			concurrency.WithContext(context.WithoutCancel(ctx)))
		if err != nil {
			a.log.Warn("cannot keep an etcd session alive; retrying", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		a.termOnce(ctx, s)
		s.Close() // revokes the lease, so a successor need not wait for it
	}
}

// termOnce campaigns on one session and leads until the session or ctx
// ends.
func (a *Admin) termOnce(ctx context.Context, s *concurrency.Session) {
	// Campaign does not watch the session: a campaign that outlives its
	// lease could otherwise "win" with a key etcd already deleted.
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-s.Done():
			cancel()
		case <-cctx.Done():
		}
	}()
	e := concurrency.NewElection(s, LeaderKey(a.cfg.Store.Cluster()))
	if err := e.Campaign(cctx, a.cfg.ID); err != nil {
		if cctx.Err() == nil {
			a.log.Warn("campaign failed; retrying", "err", err)
			sleep(ctx, time.Second)
		}
		return
	}
	if cctx.Err() != nil {
		return
	}
	a.leader.Store(true)
	a.log.Info("holding recovery leadership")
	a.lead(cctx)
	a.leader.Store(false)
	a.log.Info("gave up recovery leadership", "session_lost", ctx.Err() == nil)
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer rcancel()
	e.Resign(rctx) // best effort: closing the session removes the key too
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
