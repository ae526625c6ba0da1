package worker

import (
	"time"

	sdkworker "go.temporal.io/sdk/worker"
)

// heartbeatEvery caps how long the SDK holds back an activity's
// heartbeats. By default it sends them at most every 80% of the
// activity's heartbeat timeout (24 s for the Replicator's 30 s), and an
// activity learns that it was cancelled only from the answer to one: a
// VDiff or a Complete that stops the streams waited that long for them.
const heartbeatEvery = time.Second

// SDKOptions are the options of every Temporal worker Tessera runs (the
// general worker, the Replicators, and tests' workers).
func SDKOptions() sdkworker.Options {
	return sdkworker.Options{MaxHeartbeatThrottleInterval: heartbeatEvery}
}
