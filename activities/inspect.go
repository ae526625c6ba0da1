package activities

import (
	"context"
	"sync"
	"time"

	"github.com/tesseradb/tessera/pgmanager"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store"
)

// probeTimeout bounds how long InspectShard waits for one sidecar: an
// instance that does not answer by then counts as unreachable, which is
// exactly what a failover needs to know quickly.
const probeTimeout = 1500 * time.Millisecond

// Member is an instance of a shard as the durability policy sees it.
type Member struct {
	ID   string
	Zone string
}

// InstanceView is one registered instance of a shard as its sidecar
// reported it.
type InstanceView struct {
	Member
	PostgresAddr string
	// Reachable: the sidecar answered. Serving: its Postgres answers too.
	Reachable, Serving bool
	// Role is what the instance says it is ("primary" or "replica").
	Role     string
	Writable bool
	Fenced   bool
	Timeline int32
	// CurrentLSN is a primary's WAL position; ReceiveLSN and ReplayLSN
	// are how far a replica has received and replayed WAL.
	CurrentLSN, ReceiveLSN, ReplayLSN pgmanager.LSN
	SynchronousStandbyNames           string
	// Streaming lists the replicas streaming from this instance now, by
	// application name (= instance id).
	Streaming []string `json:",omitempty"`
	// Error says why the instance is not serving, if it is not.
	Error string `json:",omitempty"`
}

// Held is how much WAL a replica has: what it received or, when its
// walreceiver has not reported yet, what it replayed.
func (v InstanceView) Held() pgmanager.LSN { return max(v.ReceiveLSN, v.ReplayLSN) }

// LagBytes is WAL a replica received but has not replayed yet.
func (v InstanceView) LagBytes() uint64 {
	if v.ReceiveLSN > v.ReplayLSN {
		return uint64(v.ReceiveLSN - v.ReplayLSN)
	}
	return 0
}

// ShardView is a snapshot of a shard: its recorded state and every
// instance with a live sidecar, sorted by id.
type ShardView struct {
	State     store.ShardState
	Instances []InstanceView
}

// Instance returns the view of one instance, if it is registered.
func (v ShardView) Instance(id string) (InstanceView, bool) {
	for _, in := range v.Instances {
		if in.ID == id {
			return in, true
		}
	}
	return InstanceView{}, false
}

// Members lists every registered instance, for the durability policy.
func (v ShardView) Members() []Member {
	out := make([]Member, 0, len(v.Instances))
	for _, in := range v.Instances {
		out = append(out, in.Member)
	}
	return out
}

// ReportedPrimaries lists the serving instances that say they are an
// unfenced primary.
func (v ShardView) ReportedPrimaries() []string {
	var out []string
	for _, in := range v.Instances {
		if in.Serving && in.Role == store.RolePrimary && !in.Fenced {
			out = append(out, in.ID)
		}
	}
	return out
}

// InspectShard reads a shard's state and asks every registered sidecar of
// it for its status, all at once. Instances that do not answer are in the
// view as unreachable, not an error: deciding what to do about them is
// the workflow's business.
func (a *Activities) InspectShard(ctx context.Context, shard string) (ShardView, error) {
	defer heartbeating(ctx)()
	if err := a.requireShard(ctx, shard); err != nil {
		return ShardView{}, err
	}
	st, err := a.cfg.Store.GetShardState(ctx, shard)
	if err != nil {
		return ShardView{}, passOn(err)
	}
	recs, err := a.shardRecords(ctx, shard)
	if err != nil {
		return ShardView{}, err
	}
	view := ShardView{State: st, Instances: make([]InstanceView, len(recs))}
	var wg sync.WaitGroup
	for i, rec := range recs {
		wg.Go(func() { view.Instances[i] = a.probe(ctx, rec) })
	}
	wg.Wait()
	// A worker stopping cancels its activities: the probes then failed
	// for that reason, not because the instances are gone, and a view
	// showing them all unreachable would mislead the workflow. The
	// activity fails instead, and runs again on another worker.
	if err := ctx.Err(); err != nil {
		return ShardView{}, err
	}
	return view, nil
}

// probe asks one sidecar for its instance's status.
func (a *Activities) probe(ctx context.Context, rec store.Record) InstanceView {
	v := InstanceView{Member: Member{ID: rec.InstanceID, Zone: rec.Zone}, PostgresAddr: rec.PostgresAddr, Role: rec.Role}
	c, err := a.client(rec.GRPCAddr)
	if err != nil {
		v.Error = err.Error()
		return v
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	st, err := c.Status(ctx, &pb.StatusRequest{})
	if err != nil {
		v.Error = sidecarError("status of", rec.InstanceID, err).Error()
		return v
	}
	v.Reachable = true
	fillView(&v, st)
	return v
}

func fillView(v *InstanceView, st *pb.InstanceStatus) {
	h := st.GetHealth()
	v.Serving = h.GetServing() && h.GetError() == ""
	if h.GetRole() != "" {
		v.Role = h.GetRole()
	}
	v.Writable, v.Fenced, v.Timeline, v.Error = h.GetWritable(), h.GetFenced(), h.GetTimeline(), h.GetError()
	v.CurrentLSN = lsnOrZero(h.GetCurrentLsn())
	v.ReceiveLSN = lsnOrZero(h.GetReceiveLsn())
	v.ReplayLSN = lsnOrZero(h.GetReplayLsn())
	v.SynchronousStandbyNames = st.GetSynchronousStandbyNames()
	for _, r := range st.GetReplicas() {
		if r.GetState() == "streaming" {
			v.Streaming = append(v.Streaming, r.GetApplicationName())
		}
	}
}

// lsnOrZero parses an LSN a sidecar reported; the sidecar formats them
// itself, so one that does not parse means "not known" (0).
func lsnOrZero(s string) pgmanager.LSN {
	l, err := pgmanager.ParseLSN(s)
	if err != nil {
		return 0
	}
	return l
}
