package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"
)

// heartbeatEvery is how often a running activity tells Temporal it is
// alive. Workflows give activities a heartbeat timeout a few times this
// long, so that a step whose worker died (kill -9, a lost host) is retried
// on another worker within seconds rather than after its whole
// start-to-close timeout: a failover must not wait minutes for a worker
// that is gone.
const heartbeatEvery = time.Second

// heartbeating records a heartbeat at once and every heartbeatEvery until
// the returned function is called. Every activity starts it: their calls
// to sidecars and waits can take longer than the heartbeat timeout.
func heartbeating(ctx context.Context) (stop func()) {
	activity.RecordHeartbeat(ctx)
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
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() { close(done) }
}
