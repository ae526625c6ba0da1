package workflows

import (
	"fmt"

	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/topo/store"
)

// acts names the activities: a method value of a nil *Activities carries
// the method's name, which is the name Register gives the activity, and
// its signature, which the typed calls below check at compile time.
var acts *activities.Activities

// budget is how long one attempt of a step may take and how many
// attempts it gets.
type budget struct {
	timeout  time.Duration
	attempts int32
}

var (
	// quick: fencing a primary that may be gone or hung must not hold a
	// failover up; routers stop writing to it once the new primary is
	// published anyway, so one short attempt is enough.
	quick = budget{2 * time.Second, 1}
	// normal: etcd writes, status probes, fencing, reconfiguration.
	normal = budget{20 * time.Second, 5}
	// promotion waits for pg_promote, which replays what is left.
	promotion = budget{90 * time.Second, 3}
	// rewinding stops Postgres, runs pg_rewind and starts it again.
	rewinding = budget{5 * time.Minute, 3}
	// replay: a switchover's wait for the candidate, within the time the
	// routers hold statements; one attempt, so a slow replica aborts it.
	replay = budget{bufferFor - 2*time.Second, 1}
	// streaming: a repointed replica reconnecting.
	streaming = budget{30 * time.Second, 1}
)

// heartbeatTimeout: an attempt whose worker stopped heartbeating this
// long (it died) is retried on another worker. Activities heartbeat
// every second while they run.
const heartbeatTimeout = 5 * time.Second

func (b budget) ctx(ctx workflow.Context) workflow.Context {
	return workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		StartToCloseTimeout: b.timeout,
		HeartbeatTimeout:    heartbeatTimeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    500 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    10 * time.Second,
			MaximumAttempts:    b.attempts,
		},
	})
}

// localCtx gives a step run as a local activity the same time and
// attempts as b.
func (b budget) localCtx(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
		StartToCloseTimeout: b.timeout,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:    500 * time.Millisecond,
			BackoffCoefficient: 2,
			MaximumInterval:    10 * time.Second,
			MaximumAttempts:    b.attempts,
		},
	})
}

// runner runs one step of a workflow; summary names it in the Web UI.
type runner func(ctx workflow.Context, b budget, summary string, activity any, args ...any) workflow.Future

// remote runs a step as an activity: the server queues it for any
// worker, and a worker that dies while running it is noticed by its
// heartbeat and replaced (heartbeatTimeout). Each such step costs a
// round trip through the server and a workflow task of its own, tens of
// milliseconds on a busy machine.
func remote(ctx workflow.Context, b budget, summary string, activity any, args ...any) workflow.Future {
	return workflow.ExecuteActivity(withSummary(b.ctx(ctx), "%s", summary), activity, args...)
}

// local runs a step as a local activity: in the worker running the
// workflow task, with no round trip through the server; its result is
// recorded with the workflow task's completion. If that worker dies
// first, the workflow task times out and another worker runs every step
// since the last recorded one again, so a step run this way must be
// safe to repeat, and to repeat after the local steps that followed it
// (switchover.go says which are). The SDK gives local activities no
// summary: the UI shows them as markers named by their activity type.
func local(ctx workflow.Context, b budget, _ string, activity any, args ...any) workflow.Future {
	return workflow.ExecuteLocalActivity(b.localCtx(ctx), activity, args...)
}

func inspect(ctx workflow.Context, shard string) (activities.ShardView, error) {
	var v activities.ShardView
	err := workflow.ExecuteActivity(withSummary(normal.ctx(ctx), "inspect shard %s", shard), acts.InspectShard, shard).Get(ctx, &v)
	return v, err
}

func fence(ctx workflow.Context, run runner, b budget, shard, instance string) (activities.FenceResult, error) {
	var r activities.FenceResult
	err := run(ctx, b, fmt.Sprintf("fence %s of shard %s", instance, shard), acts.FenceInstance, activities.InstanceInput{Shard: shard, Instance: instance}).Get(ctx, &r)
	return r, err
}

// drainWait bounds how long a switchover lets open transactions finish
// before it fences the old primary; routers hold new statements
// meanwhile, so it adds to the pause.
const drainWait = 2 * time.Second

// drainQuiet is how long no client statement may have run on the old
// primary before a switchover fences it: routers that have not seen the
// buffer signal yet still send statements there, which the fence would
// end or refuse. Once the steps of the pause stopped being a round trip
// each, the fence came 10-100 ms after the signal, and under load a
// writer saw a statement refused (57P03) and one ended (08006). On an
// idle shard it adds nothing; under writers, at most itself.
const drainQuiet = 50 * time.Millisecond

func drain(ctx workflow.Context, run runner, shard, instance string) (int, error) {
	var open int
	in := activities.DrainInput{Shard: shard, Instance: instance, Wait: drainWait, Quiet: drainQuiet}
	err := run(ctx, budget{drainWait + 5*time.Second, 1}, fmt.Sprintf("drain %s of shard %s", instance, shard), acts.DrainTransactions, in).Get(ctx, &open)
	return open, err
}

func unfence(ctx workflow.Context, shard, instance string) error {
	return workflow.ExecuteActivity(withSummary(normal.ctx(ctx), "unfence %s of shard %s", instance, shard), acts.UnfenceInstance, activities.InstanceInput{Shard: shard, Instance: instance}).Get(ctx, nil)
}

func promote(ctx workflow.Context, shard, instance string) error {
	return workflow.ExecuteActivity(withSummary(promotion.ctx(ctx), "promote %s of shard %s", instance, shard), acts.PromoteInstance, activities.InstanceInput{Shard: shard, Instance: instance}).Get(ctx, nil)
}

func publish(ctx workflow.Context, run runner, in activities.PublishInput) (store.ShardState, error) {
	var st store.ShardState
	err := run(ctx, normal, fmt.Sprintf("publish %s as primary of shard %s", in.Primary, in.Shard), acts.PublishPrimary, in).Get(ctx, &st)
	return st, err
}

func follow(ctx workflow.Context, run runner, shard, instance, primary string) error {
	in := activities.FollowInput{Shard: shard, Instance: instance, Primary: primary}
	return run(ctx, normal, fmt.Sprintf("point %s of shard %s at %s", instance, shard, primary), acts.FollowPrimary, in).Get(ctx, nil)
}

func rewind(ctx workflow.Context, shard, instance, primary string) error {
	in := activities.FollowInput{Shard: shard, Instance: instance, Primary: primary}
	return workflow.ExecuteActivity(withSummary(rewinding.ctx(ctx), "rewind %s of shard %s onto %s", instance, shard, primary), acts.RewindInstance, in).Get(ctx, nil)
}

func awaitStreaming(ctx workflow.Context, shard, instance, primary string) error {
	in := activities.FollowInput{Shard: shard, Instance: instance, Primary: primary}
	return workflow.ExecuteActivity(withSummary(streaming.ctx(ctx), "wait for %s of shard %s to stream from %s", instance, shard, primary), acts.AwaitStreaming, in).Get(ctx, nil)
}

func waitForReplay(ctx workflow.Context, run runner, shard, instance string, lsn pgmanager.LSN) error {
	in := activities.ReplayInput{Shard: shard, Instance: instance, LSN: lsn}
	return run(ctx, replay, fmt.Sprintf("wait for %s of shard %s to replay up to %s", instance, shard, lsn), acts.WaitForReplay, in).Get(ctx, nil)
}

func applyDurability(ctx workflow.Context, shard, primary string) (string, error) {
	return awaitDurability(ctx, startDurability(ctx, shard, primary))
}

// startDurability starts ApplyDurability; awaitDurability waits for it.
func startDurability(ctx workflow.Context, shard, primary string) workflow.Future {
	in := activities.DurabilityInput{Shard: shard, Primary: primary}
	return workflow.ExecuteActivity(withSummary(normal.ctx(ctx), "apply the durability policy of shard %s on %s", shard, primary), acts.ApplyDurability, in)
}

func awaitDurability(ctx workflow.Context, f workflow.Future) (string, error) {
	var names string
	err := f.Get(ctx, &names)
	return names, err
}

func storeDurability(ctx workflow.Context, shard string, policy store.Durability) error {
	in := activities.PolicyInput{Shard: shard, Policy: policy}
	return workflow.ExecuteActivity(withSummary(normal.ctx(ctx), "store durability %s for shard %s", policy, shard), acts.StoreDurability, in).Get(ctx, nil)
}

func setBuffer(ctx workflow.Context, run runner, shard, reason string) (time.Time, error) {
	var at time.Time
	in := activities.BufferInput{Shard: shard, Reason: reason, For: bufferFor}
	err := run(ctx, normal, fmt.Sprintf("ask routers to hold shard %s", shard), acts.SetBuffer, in).Get(ctx, &at)
	return at, err
}

func clearBuffer(ctx workflow.Context, run runner, shard, reason string) (time.Time, error) {
	var at time.Time
	in := activities.BufferInput{Shard: shard, Reason: reason}
	err := run(ctx, normal, fmt.Sprintf("let routers resume shard %s", shard), acts.ClearBuffer, in).Get(ctx, &at)
	return at, err
}
