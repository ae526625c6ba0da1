package workflows

import (
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/topo/store"
)

// DurabilityInput sets a shard's durability policy.
type DurabilityInput struct {
	Shard  string
	Policy store.Durability
}

// DurabilityResult is the synchronous_standby_names the policy gave the
// primary.
type DurabilityResult struct {
	SynchronousStandbyNames string
}

// SetDurability records a shard's durability policy in ShardState and
// applies it to the primary's synchronous_standby_names.
func SetDurability(ctx workflow.Context, in DurabilityInput) (DurabilityResult, error) {
	p, err := track(ctx)
	if err != nil {
		return DurabilityResult{}, err
	}
	if in.Shard == "" {
		return DurabilityResult{}, activities.Refuse(pgerr.InvalidParameterValue, "a shard is required")
	}
	if err := in.Policy.Check(); err != nil {
		return DurabilityResult{}, activities.Refuse(pgerr.Code(err), "%v", err)
	}
	p.step("recording durability %s for shard %s", in.Policy.OrDefault(), in.Shard)
	if err := storeDurability(ctx, in.Shard, in.Policy); err != nil {
		return DurabilityResult{}, failed(err, "recording the durability policy of shard %s", in.Shard)
	}
	p.step("applying durability %s on the primary of shard %s", in.Policy.OrDefault(), in.Shard)
	names, err := applyDurability(ctx, in.Shard, "")
	if err != nil {
		return DurabilityResult{}, failed(err, "applying the durability policy of shard %s", in.Shard)
	}
	p.step("synchronous_standby_names is %q", names)
	return DurabilityResult{SynchronousStandbyNames: names}, nil
}
