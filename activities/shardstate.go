package activities

import (
	"context"
	"errors"
	"time"

	"github.com/tesseradb/tessera/topo/store"
)

// PublishInput makes Primary the shard's recorded primary, provided the
// record still names Expected ("" when none was recorded).
type PublishInput struct {
	Shard    string
	Primary  string
	Expected string
}

// errUnchanged aborts an UpdateShardState that has nothing to write.
var errUnchanged = errors.New("unchanged")

// PublishPrimary records the new primary in ShardState and increments the
// term; routers send writes there from then on. It is idempotent: when
// the record already names in.Primary (this activity ran before and its
// answer was lost) it writes nothing and returns the state as it is, so a
// retry never increments the term twice. When the record names neither
// in.Expected nor in.Primary, another operation moved the primary
// meanwhile, and this one must not overwrite it.
func (a *Activities) PublishPrimary(ctx context.Context, in PublishInput) (store.ShardState, error) {
	defer heartbeating(ctx)()
	if in.Shard == "" || in.Primary == "" {
		return store.ShardState{}, Refuse(invalidParameter, "shard and primary are required")
	}
	if err := a.requireShard(ctx, in.Shard); err != nil {
		return store.ShardState{}, err
	}
	st, err := a.cfg.Store.UpdateShardState(ctx, in.Shard, func(s *store.ShardState) error {
		switch s.Primary {
		case in.Primary:
			return errUnchanged
		case in.Expected:
			s.Primary = in.Primary
			s.Term++
			return nil
		}
		return Refuse(notInState, "shard %s: the primary is now %s, not %s; another operation moved it", in.Shard, s.Primary, in.Expected)
	})
	if errors.Is(err, errUnchanged) {
		return a.shardState(ctx, in.Shard)
	}
	if err != nil {
		return store.ShardState{}, passOn(err)
	}
	a.log.Info("published the primary", "shard", in.Shard, "primary", in.Primary, "term", st.Term)
	return st, nil
}

// BufferInput asks routers to hold the shard's new statements for For.
type BufferInput struct {
	Shard  string
	Reason string
	For    time.Duration
}

// SetBuffer sets the shard's buffer signal for in.For (routers measure it
// by their own clocks from when they see it) and returns when it was set,
// by this worker's clock. Running it again sets it anew.
func (a *Activities) SetBuffer(ctx context.Context, in BufferInput) (time.Time, error) {
	defer heartbeating(ctx)()
	if in.Shard == "" || in.Reason == "" || in.For <= 0 {
		return time.Time{}, Refuse(invalidParameter, "shard, reason and a positive duration are required")
	}
	if err := a.requireShard(ctx, in.Shard); err != nil {
		return time.Time{}, err
	}
	now := time.Now()
	_, err := a.cfg.Store.UpdateShardState(ctx, in.Shard, func(s *store.ShardState) error {
		s.Buffer = &store.BufferSignal{Reason: in.Reason, Until: now.Add(in.For), For: in.For, Set: now}
		return nil
	})
	if err != nil {
		return time.Time{}, passOn(err)
	}
	return now, nil
}

// ClearBuffer removes the shard's buffer signal if in.Reason set it (a
// signal someone else set is theirs to clear) and returns when, by this
// worker's clock.
func (a *Activities) ClearBuffer(ctx context.Context, in BufferInput) (time.Time, error) {
	defer heartbeating(ctx)()
	_, err := a.cfg.Store.UpdateShardState(ctx, in.Shard, func(s *store.ShardState) error {
		if s.Buffer == nil || s.Buffer.Reason != in.Reason {
			return errUnchanged
		}
		s.Buffer = nil
		return nil
	})
	if err != nil && !errors.Is(err, errUnchanged) {
		return time.Time{}, passOn(err)
	}
	return time.Now(), nil
}

// PolicyInput sets a shard's durability policy.
type PolicyInput struct {
	Shard  string
	Policy store.Durability
}

// StoreDurability records the shard's durability policy in ShardState.
func (a *Activities) StoreDurability(ctx context.Context, in PolicyInput) (store.ShardState, error) {
	defer heartbeating(ctx)()
	if err := in.Policy.Check(); err != nil {
		return store.ShardState{}, passOn(err)
	}
	if err := a.requireShard(ctx, in.Shard); err != nil {
		return store.ShardState{}, err
	}
	st, err := a.cfg.Store.UpdateShardState(ctx, in.Shard, func(s *store.ShardState) error {
		s.Durability = in.Policy
		return nil
	})
	if err != nil {
		return store.ShardState{}, passOn(err)
	}
	return st, nil
}

// requireShard refuses a shard the cluster does not have (42704), before
// an activity writes its state: a mistyped name must create nothing.
func (a *Activities) requireShard(ctx context.Context, shard string) error {
	if shard == "" {
		return Refuse(invalidParameter, "a shard is required")
	}
	known, err := a.cfg.Store.ShardKnown(ctx, shard)
	if err != nil {
		return passOn(err)
	}
	if !known {
		return Refuse(undefinedObject, "shard %q does not exist: no instance of it is registered, no state is stored for it and the topology does not name it", shard)
	}
	return nil
}

func (a *Activities) shardState(ctx context.Context, shard string) (store.ShardState, error) {
	st, err := a.cfg.Store.GetShardState(ctx, shard)
	if err != nil {
		return store.ShardState{}, passOn(err)
	}
	return st, nil
}
