package sidecar

import (
	"context"

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

// followShardState watches the shard's state until ctx ends and abandons
// the pools' connections whenever the recorded primary moves away from
// this instance.
func (s *Server) followShardState(ctx context.Context) {
	states, err := s.cfg.Store.WatchShardStates(ctx)
	if err != nil {
		s.log.Warn("not following the shard state: statements on a deposed primary are not abandoned", "err", err)
		return
	}
	recorded := "" // the primary the state named last
	for list := range states {
		for _, st := range list {
			if st.Shard != s.cfg.ShardUID {
				continue
			}
			if recorded == s.cfg.InstanceID && s.deposedBy(st) {
				n := s.pools.abandon()
				s.log.Warn("the shard's primary moved to another instance: abandoned this instance's connections",
					"new_primary", st.Primary, "term", st.Term, "connections", n)
			}
			recorded = st.Primary
		}
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
