package sidecar

import (
	"context"
	"time"

	"github.com/tesseradb/tessera/topo/store"
)

// A primary that hangs (its processes stopped, its disk stalled) keeps
// the statements sent to it waiting: a read on its socket never returns.
// Once the control plane has published another primary, nothing those
// statements could still do matters to their clients, who must learn
// they failed and write to the new primary. So the sidecar follows its
// shard's state, and when the recorded primary moves from its instance
// to another, it closes every connection of its pools from outside, at
// once, without a word to Postgres, and ends the dials under way:
//
//   - a batch waiting for its answer gets 08006 (whether it committed on
//     the old primary is unknown, as after any lost connection);
//   - a batch not yet sent, or waiting for a connection, gets 08001: it
//     did not run, and a router may run it on the new primary;
//   - a pipelined read gets 08001 too: it has no side effects, so a
//     router may run it again whether or not it ran;
//   - neither is sent again on this instance, whose Postgres may hang.
//
// A switchover fences the old primary before it publishes the new one,
// which has ended its sessions already; this changes nothing there.

// A deposed primary also fences itself. A primary that crashed could not
// be fenced while it was down; when its host comes back, its Postgres
// starts as a primary on its old timeline, writable until Rejoin fences
// and rewinds it. Routers send it nothing once they follow the new
// state, but one that has not seen it yet, or anything else reaching this
// sidecar, could write there, and the write would be lost at the rewind.
// So whenever Postgres runs as a primary while the recorded primary is
// another instance, the sidecar closes its gate (fence.go: client batches
// get 57P03, which routers run again on the real primary) and fences
// Postgres through pgmanager, as the Fence RPC does. It looks when it
// starts (it reads the state before its first observation, so the gate
// never opens in between), whenever the recorded primary changes, and at
// each health observation. When the recorded primary moves away from
// this instance, the gate closes at once, before the connections are
// abandoned, without waiting for a look at Postgres; if Postgres turns
// out to run in recovery (unfenced), the next observation reopens it.
//
// One primary is not deposed: a replica promoted since the recorded
// primary was (a failover's or switchover's candidate, which the
// workflow publishes next). The sidecar tells it by having seen Postgres
// in recovery since it saw that primary recorded. A returning primary
// was never seen so: its sidecar starts with it, or it ran as a primary
// all along (a hung one that wakes up after its successor was
// published).
//
// The self-fence does not race the workflows. It is not an operation:
// any operation setting the gate afterwards wins (Unfence, Rewind), an
// observation made before an operation is not applied after it, and the
// fencing itself runs under opMu, which the operations that change what
// Postgres is (Promote, Unfence, FollowPrimary, Rewind) hold too, after
// looking again. A rewound instance is a replica, so the rule no longer
// applies; a switchover that fails before publishing unfences an
// instance the state still names, to which it never applied.

// deposeTimeout bounds one self-fence.
const deposeTimeout = 10 * time.Second

// readShardState learns the shard's recorded primary before the sidecar
// serves. Start fails without it, as it does when it cannot register:
// opening the gate in front of a primary that may have been replaced
// could let a write through that the rewind then loses.
func (s *Server) readShardState(ctx context.Context) error {
	st, err := s.cfg.Store.GetShardState(ctx, s.cfg.ShardUID)
	if err != nil {
		return err
	}
	s.noteShardState(st)
	return nil
}

// noteShardState records st's primary with the gate.
func (s *Server) noteShardState(st store.ShardState) {
	s.fence.recordedState(recordedPrimary{st.Primary, st.Term}, s.deposedBy(st), st.Revision)
}

// followShardState watches the shard's state until ctx ends; whenever
// the recorded primary changes it has the monitor look at Postgres (which
// fences a deposed primary, above), and when it moves away from this
// instance, it abandons the pools' connections.
func (s *Server) followShardState(ctx context.Context) {
	var states <-chan []store.ShardState
	for {
		var err error
		if states, err = s.cfg.Store.WatchShardStates(ctx); err == nil {
			break
		}
		s.log.Warn("cannot follow the shard state yet: statements on a deposed primary are not abandoned", "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
	recorded := "" // the primary the state named last
	var term int64
	first := true
	for list := range states {
		for _, st := range list {
			if st.Shard != s.cfg.ShardUID {
				continue
			}
			if first || st.Primary != recorded || st.Term != term {
				s.noteShardState(st)
				s.kickHealth()
			}
			if recorded == s.cfg.InstanceID && s.deposedBy(st) {
				s.movedAway(st)
			}
			recorded, term, first = st.Primary, st.Term, false
		}
	}
}

// movedAway closes the gate and abandons the pools' connections: the
// recorded primary moved from this instance to st's.
func (s *Server) movedAway(st store.ShardState) {
	// The gate first, as Fence does: a batch that found it open holds a
	// connection abandon closes.
	s.fence.depose()
	n := s.pools.abandon()
	s.log.Warn("the shard's primary moved to another instance: abandoned this instance's connections",
		"new_primary", st.Primary, "term", st.Term, "connections", n)
}

// depose fences Postgres whenever an observation found it a deposed
// primary (kickDepose), until ctx ends.
func (s *Server) depose(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.deposeKick:
		}
		s.fencePostgresIfDeposed(ctx)
	}
}

// fencePostgresIfDeposed looks again, under opMu, and fences Postgres if
// it is still a deposed primary.
func (s *Server) fencePostgresIfDeposed(ctx context.Context) {
	s.opMu.Lock()
	defer s.opMu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, deposeTimeout)
	defer cancel()
	gen := s.fence.generation()
	ps, err := s.cfg.Manager.Status(ctx)
	if err != nil || !ps.Running || !s.fence.observed(gen, ps) {
		return
	}
	if err := s.cfg.Manager.Fence(ctx); err != nil {
		// The gate stays closed; the next observation tries again.
		s.log.Warn("could not fence this deposed primary's Postgres; its sidecar refuses every client batch", "err", err)
		return
	}
	s.log.Warn("this instance runs as a primary but the shard's state names another: fenced it")
	s.kickHealth()
}

func (s *Server) kickDepose() {
	select {
	case s.deposeKick <- struct{}{}:
	default:
	}
}

// deposedBy reports whether st names another primary than this instance.
func (s *Server) deposedBy(st store.ShardState) bool {
	return st.Primary != "" && st.Primary != s.cfg.InstanceID
}

// abandon closes every connection of every pool; see above.
func (ps *pools) abandon() int {
	n := 0
	for _, p := range ps.all() {
		n += p.abandon()
	}
	return n
}

// abandon closes every open connection of the pool from outside and
// ends the dials under way. The users of connections in use meet the
// closed socket and end their batches (backend.deposed); the idle ones
// leave the pool. It returns how many connections it closed.
func (p *pool) abandon() int {
	p.mu.Lock()
	p.epoch++
	p.cancelDials()
	p.dials, p.cancelDials = context.WithCancel(context.Background())
	conns := make([]*backend, 0, len(p.conns))
	for b := range p.conns {
		conns = append(conns, b)
	}
	clear(p.conns)
	idle := p.idle
	p.idle = nil
	p.open -= len(idle)
	p.wakeOne()
	p.mu.Unlock()
	for _, b := range conns {
		b.abandon()
	}
	for _, b := range idle {
		b.close()
	}
	return len(conns)
}
