package sidecar

import (
	"context"
	"time"

	"github.com/tesseradb/tessera/topo/store"
)

// The isolation fence. A sidecar fences a deposed primary when it sees
// the shard's state name another instance (depose.go), but a host cut off
// from the network sees nothing: its sidecar would keep serving writes
// while the admin, which lost it, fails the shard over to a replica on
// the other side, and two primaries would take writes. So, with
// Config.IsolationFence set, the sidecar reads the shard's state every
// IsolationFence/4 (a linearizable read, which etcd answers only with a
// quorum of its members behind it, bounded by IsolationFence/2), and
// when no read has succeeded for IsolationFence, measured from the start
// of the last one that did, it closes its gate (fence.go): client batches
// get 57P03, which routers run again on the shard's real primary, with
// a message saying the instance is cut off. It warns once when it closes
// the gate so and once when it opens it again.
//
// When a read succeeds again, the state it read is noted first, as if
// followShardState had seen it, and only then is the isolation lifted,
// under the same lock: a primary deposed while it was cut off stays
// fenced (the gate closes by deposition before the isolation ends, and
// the depose logic fences Postgres), one the state still names serves
// again. The isolation is a flag of its own in the gate, so lifting it
// never opens a gate that an operation (Fence) or a deposition closed;
// an Unfence while cut off leaves the gate closed until the topology
// service answers.
//
// Every role is fenced so, replicas too, for two reasons. The sidecar
// knows its role only from its last look at Postgres, which lags a
// promotion (a failover's candidate, cut off just after it was
// promoted, must not take writes either). And a cut-off replica most
// likely follows the cut-off primary, or nothing: once another primary
// takes writes its reads are stale, which is why a fenced instance
// refuses reads too. Routers take the refusal as a fenced instance's.
//
// What it guarantees: the sidecar runs no new client batch more than
// IsolationFence after sending its last read that reached a quorum. The
// admin fails a primary over once it has lost it for its detection
// window (1.5 s by default), so with IsolationFence shorter than that, a
// primary cut off from etcd and the admin alike has closed its gate
// before a failover can start; one the admin lost while it still reaches
// etcd learns of the failover from the state instead (depose.go). What
// it does not: Postgres itself is not fenced, so a client connecting to
// Postgres directly, past the sidecar, can still write (as for the Fence
// RPC); and a batch already sent to Postgres when the gate closes runs
// to its end. An etcd that loses its quorum, or a leader election longer
// than IsolationFence, closes every gate of the cluster until it answers
// again.

// MinIsolationFence is the shortest IsolationFence a Config may set:
// shorter, and an etcd leader's ordinary hiccups would fence primaries.
const MinIsolationFence = 200 * time.Millisecond

// probe is one read of the shard's state; start is when it was sent.
type probe struct {
	start time.Time
	st    store.ShardState
	err   error
}

// watchIsolation probes the topology service until ctx ends and closes
// the gate while it does not answer (above). lastOK is when the last
// read that succeeded was sent (Start's).
func (s *Server) watchIsolation(ctx context.Context, lastOK time.Time) {
	limit := s.cfg.IsolationFence
	tick := time.NewTicker(limit / 4)
	defer tick.Stop()
	cutOff := time.NewTimer(time.Until(lastOK.Add(limit)))
	defer cutOff.Stop()
	results := make(chan probe, 1)
	probing, isolated := false, false
	var isolatedAt time.Time
	for {
		select {
		case <-ctx.Done():
			if probing {
				<-results
			}
			return
		case <-tick.C:
			// One probe at a time: one that outlives the tick has failed
			// anyway once its timeout ends.
			if !probing {
				probing = true
				go func() { results <- s.probeTopology(ctx) }()
			}
		case p := <-results:
			probing = false
			if p.err != nil {
				continue
			}
			if p.start.After(lastOK) {
				lastOK = p.start
			}
			cutOff.Reset(time.Until(lastOK.Add(limit)))
			s.noteProbedState(p.st, isolated)
			if isolated {
				isolated = false
				s.log.Warn("reached the topology service again: client batches run again unless the instance is fenced",
					"gate_closed_for", time.Since(isolatedAt).Round(time.Millisecond))
			}
		case <-cutOff.C:
			if since := time.Since(lastOK); !isolated && since >= limit {
				isolated, isolatedAt = true, time.Now()
				s.fence.isolate()
				s.log.Warn("cut off from the topology service: refusing every client batch until it answers again",
					"last_answer_sent", since.Round(time.Millisecond), "isolation_fence", limit)
				s.kickHealth()
			}
		}
	}
}

// probeTopology reads the shard's state. GetShardState's read is
// linearizable (etcd's default, not WithSerializable): a member that
// cannot reach a quorum does not answer it from its own copy.
func (s *Server) probeTopology(ctx context.Context) probe {
	p := probe{start: time.Now()}
	ctx, cancel := context.WithTimeout(ctx, s.cfg.IsolationFence/2)
	defer cancel()
	p.st, p.err = s.cfg.Store.GetShardState(ctx, s.cfg.ShardUID)
	return p
}

// noteProbedState notes a state a probe read, as followShardState notes
// a state it watched, unless a newer one was noted meanwhile: the probe
// may find a change before the watch delivers it (a watch resumes on its
// own after etcd comes back). With endIsolation it also lifts the
// isolation, once the state is noted, under the same lock (above).
func (s *Server) noteProbedState(st store.ShardState, endIsolation bool) {
	prev, changed := s.fence.probedState(recordedPrimary{st.Primary, st.Term}, s.deposedBy(st), st.Revision, endIsolation)
	if changed && prev.primary == s.cfg.InstanceID && s.deposedBy(st) {
		s.movedAway(st)
	}
	if endIsolation {
		s.kickDepose()
	}
	if changed || endIsolation {
		s.kickHealth()
	}
}

// probedState is recordedState for a state read by a probe: it is noted
// unless the state noted last is newer. It returns the primary recorded
// before, and whether the recorded primary changed. With endIsolation it
// then lifts the isolation; a primary the recorded state deposes stays
// closed, by deposition, as depose closes it (a replica so closed is
// reopened by the next observation, fenceGate.observed).
func (g *fenceGate) probedState(r recordedPrimary, deposed bool, revision int64, endIsolation bool) (prev recordedPrimary, changed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	prev = g.recorded
	if revision >= g.revision {
		g.recordLocked(r, deposed, revision)
		changed = r != prev
	}
	if endIsolation && g.isolated {
		if g.deposed && !g.sawReplica && !g.fenced {
			g.deposeLocked()
		}
		g.isolated = false
		g.closed.Store(g.fenced)
	}
	return prev, changed
}

// isolate closes the gate for isolation.
func (g *fenceGate) isolate() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.isolated = true
	g.closed.Store(true)
}

// onlyIsolated reports whether the gate is closed for isolation alone.
func (g *fenceGate) onlyIsolated() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.isolated && !g.fenced
}
