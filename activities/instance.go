package activities

import (
	"context"
	"net"
	"slices"
	"strconv"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// pollInterval is how often the waits look again.
const pollInterval = 100 * time.Millisecond

// replayPoll is how often WaitForReplay looks again. It waits inside a
// switchover's pause, while routers hold the shard's statements, and
// each look is one Status call (a few milliseconds), so it looks often.
const replayPoll = 10 * time.Millisecond

// InstanceInput names one instance of a shard.
type InstanceInput struct {
	Shard    string
	Instance string
}

// FenceResult is an instance's WAL position once it is fenced: every
// commit it acknowledged is at or before CurrentLSN.
type FenceResult struct {
	CurrentLSN pgmanager.LSN
}

// FenceInstance makes an instance read-only and ends its client sessions
// (pgmanager's Fence). Fencing a fenced instance does nothing more.
func (a *Activities) FenceInstance(ctx context.Context, in InstanceInput) (FenceResult, error) {
	defer heartbeating(ctx)()
	_, c, err := a.dial(ctx, in.Shard, in.Instance)
	if err != nil {
		return FenceResult{}, err
	}
	st, err := c.Fence(ctx, &pb.FenceRequest{})
	if err != nil {
		return FenceResult{}, sidecarError("fencing", in.Instance, err)
	}
	return FenceResult{CurrentLSN: lsnOrZero(st.GetHealth().GetCurrentLsn())}, nil
}

// UnfenceInstance makes a fenced instance writable again.
func (a *Activities) UnfenceInstance(ctx context.Context, in InstanceInput) error {
	defer heartbeating(ctx)()
	_, c, err := a.dial(ctx, in.Shard, in.Instance)
	if err != nil {
		return err
	}
	if _, err := c.Unfence(ctx, &pb.UnfenceRequest{}); err != nil {
		return sidecarError("unfencing", in.Instance, err)
	}
	return nil
}

// PromoteInstance promotes a replica; promoting a primary succeeds at
// once, so a retried promotion is harmless.
func (a *Activities) PromoteInstance(ctx context.Context, in InstanceInput) error {
	defer heartbeating(ctx)()
	_, c, err := a.dial(ctx, in.Shard, in.Instance)
	if err != nil {
		return err
	}
	if _, err := c.Promote(ctx, &pb.PromoteRequest{}); err != nil {
		return sidecarError("promoting", in.Instance, err)
	}
	return nil
}

// FollowInput points Instance at Primary, both instances of Shard.
type FollowInput struct {
	Shard    string
	Instance string
	Primary  string
}

// FollowPrimary repoints a replica at the primary (pgmanager's
// FollowPrimary: slot, primary_conninfo, reload). A replica that already
// follows it is left streaming.
func (a *Activities) FollowPrimary(ctx context.Context, in FollowInput) error {
	defer heartbeating(ctx)()
	ep, c, err := a.followTarget(ctx, in)
	if err != nil {
		return err
	}
	if _, err := c.FollowPrimary(ctx, &pb.FollowPrimaryRequest{Primary: ep}); err != nil {
		return sidecarError("repointing", in.Instance, err)
	}
	return nil
}

// RewindInstance turns an instance, typically a former primary, into a
// replica of the primary with pg_rewind (pgmanager's Rewind), which only
// restarts it when the histories have not forked: it is safe to repeat.
func (a *Activities) RewindInstance(ctx context.Context, in FollowInput) error {
	defer heartbeating(ctx)()
	ep, c, err := a.followTarget(ctx, in)
	if err != nil {
		return err
	}
	if _, err := c.Rewind(ctx, &pb.RewindRequest{Primary: ep}); err != nil {
		return sidecarError("rewinding", in.Instance, err)
	}
	return nil
}

// followTarget returns the primary's replication endpoint and a client
// for the instance that is to follow it.
func (a *Activities) followTarget(ctx context.Context, in FollowInput) (*pb.Endpoint, *sidecar.Client, error) {
	if in.Instance == in.Primary {
		return nil, nil, Refuse(invalidParameter, "%s cannot follow itself", in.Instance)
	}
	prec, err := a.record(ctx, in.Shard, in.Primary)
	if err != nil {
		return nil, nil, err
	}
	host, portText, err := net.SplitHostPort(prec.PostgresAddr)
	port, perr := strconv.Atoi(portText)
	if err != nil || perr != nil {
		return nil, nil, Refuse(invalidParameter, "primary %s registered Postgres address %q, not host:port", in.Primary, prec.PostgresAddr)
	}
	_, c, err := a.dial(ctx, in.Shard, in.Instance)
	if err != nil {
		return nil, nil, err
	}
	return &pb.Endpoint{Host: host, Port: int32(port)}, c, nil
}

// ReplayInput asks for Instance to have replayed WAL up to LSN.
type ReplayInput struct {
	Shard    string
	Instance string
	LSN      pgmanager.LSN
}

// WaitForReplay waits until the instance has replayed WAL up to in.LSN
// and returns how far it has; it fails when the activity's time is up.
func (a *Activities) WaitForReplay(ctx context.Context, in ReplayInput) (pgmanager.LSN, error) {
	defer heartbeating(ctx)()
	_, c, err := a.dial(ctx, in.Shard, in.Instance)
	if err != nil {
		return 0, err
	}
	var replayed pgmanager.LSN
	for {
		st, err := c.Status(ctx, &pb.StatusRequest{})
		if err == nil {
			replayed = lsnOrZero(st.GetHealth().GetReplayLsn())
			if replayed >= in.LSN {
				return replayed, nil
			}
		}
		activity.RecordHeartbeat(ctx, replayed.String())
		select {
		case <-ctx.Done():
			return replayed, failure(queryCanceled, "%s replayed WAL up to %s, not %s, in time", in.Instance, replayed, in.LSN)
		case <-time.After(replayPoll):
		}
	}
}

// AwaitStreaming waits until the primary reports in.Instance among its
// streaming replicas; it fails when the activity's time is up.
func (a *Activities) AwaitStreaming(ctx context.Context, in FollowInput) error {
	defer heartbeating(ctx)()
	_, c, err := a.dial(ctx, in.Shard, in.Primary)
	if err != nil {
		return err
	}
	for {
		st, err := c.Status(ctx, &pb.StatusRequest{})
		if err == nil {
			var v InstanceView
			fillView(&v, st)
			if slices.Contains(v.Streaming, in.Instance) {
				return nil
			}
		}
		activity.RecordHeartbeat(ctx)
		select {
		case <-ctx.Done():
			return failure(queryCanceled, "%s is not streaming from %s", in.Instance, in.Primary)
		case <-time.After(pollInterval):
		}
	}
}
