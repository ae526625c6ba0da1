package actions

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"
)

// beating records details() as the activity's heartbeat at once and every
// heartbeatEvery until stop is called. Outside an activity (a test calling
// the step directly) it records nothing.
func beating(ctx context.Context, details func() any) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	activity.RecordHeartbeat(ctx, details())
	done := make(chan struct{})
	go func() {
		t := time.NewTicker(heartbeatEvery)
		defer t.Stop()
		for {
			select {
			case <-done:
				return
			case <-ctx.Done():
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx, details())
			}
		}
	}()
	return func() { close(done) }
}

// lastDetails reads the heartbeat details of the attempt before this one
// into v, reporting whether there were any.
func lastDetails(ctx context.Context, v any) bool {
	if !activity.IsActivity(ctx) || !activity.HasHeartbeatDetails(ctx) {
		return false
	}
	return activity.GetHeartbeatDetails(ctx, v) == nil
}

// noDetails is the heartbeat of a short step, which resumes nothing: the
// cutover's steps beat only so that a dead worker's attempt is noticed
// within the workflow's short heartbeat timeout, not its whole
// start-to-close timeout, while the routers hold the tables' statements.
func noDetails() any { return nil }
