package sidecar

import (
	"sync"
	"sync/atomic"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/pgwire"
)

// The sidecar is the fence. Postgres's own fence (pgmanager's Fence:
// default_transaction_read_only, a USERSET setting) is only a default:
// a session undoes it with SET, SET SESSION CHARACTERISTICS, BEGIN READ
// WRITE or set_config, and the sidecar replays each client's settings
// onto its backend. A write that got through on a fenced primary during
// a switchover would be acknowledged and then rewound away. So once
// fenced, the sidecar runs no client batch at all, reads included (a
// deposed primary's reads turn stale as soon as its successor takes
// writes): each is answered 57P03, which routers buffer and run again
// on the next primary. The workflows' own steps use the gRPC operation
// RPCs, not sessions, and are not affected.
//
// No batch slips past the gate while it closes: a batch checks the gate
// once it holds the connection it will be written on, and the gate
// closes before Postgres terminates its client backends. A batch that
// found it open was therefore on a connection Postgres already had,
// which the fence terminates, and Fence returns only once those are
// gone; whatever such a batch committed before that is in the WAL
// position the fence reports, which the new primary replays.

// fenceGate says whether client batches may run. closed is read on every
// batch (one atomic load); the rest changes only with operations, health
// observations, the shard's state and the isolation fence, under mu,
// which keeps closed equal to fenced || isolated.
type fenceGate struct {
	closed atomic.Bool

	mu sync.Mutex
	// fenced: the gate is closed by an operation, by what Postgres said
	// or by deposition. isolated: it is closed because the topology
	// service has not answered for too long (isolation.go). They are kept
	// apart so that the end of an isolation never opens a gate that
	// something else closed.
	fenced, isolated bool
	// known: the gate's state has been learned, from Postgres or an
	// operation. Until then it is closed: a sidecar starting in front of
	// a fenced instance must not open it before it has looked.
	known bool
	// gen counts the operations that set the gate, so that an
	// observation made before one is not applied after it.
	gen uint64

	// The shard's recorded primary, as the sidecar last saw it
	// (depose.go). deposed: it names another instance. sawReplica:
	// Postgres was seen in recovery since that primary was recorded,
	// so a primary it runs now was promoted since (a failover's or
	// switchover's candidate, about to be published), not deposed.
	recorded   recordedPrimary
	deposed    bool
	sawReplica bool
	// revision is the etcd revision of the shard state recorded last, so
	// that a probe's read (isolation.go) never replaces a newer one.
	revision int64
	// byDeposition: the gate was closed because the instance was a
	// deposed primary, and no operation set it since. Once Postgres runs
	// in recovery without its own fence, that no longer applies and an
	// observation reopens it.
	byDeposition bool
}

type recordedPrimary struct {
	primary string
	term    int64
}

func newFenceGate() *fenceGate {
	g := &fenceGate{fenced: true}
	g.closed.Store(true)
	return g
}

// setFenced sets fenced and publishes closed; mu is held.
func (g *fenceGate) setFenced(fenced bool) {
	g.fenced = fenced
	g.closed.Store(g.fenced || g.isolated)
}

// set is an operation's word: Fence closes the gate (before Postgres is
// fenced), Unfence and Rewind open it (after Postgres takes writes again,
// or has become a replica).
func (g *fenceGate) set(fenced bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.setFenced(fenced)
	g.known = true
	g.gen++
	g.byDeposition = false
}

// depose closes the gate when the recorded primary moves away from this
// instance: it was the primary, and is deposed (depose.go).
func (g *fenceGate) depose() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.deposeLocked()
}

// deposeLocked is depose with mu held: a gate another cause closed stays
// closed for that cause.
func (g *fenceGate) deposeLocked() {
	if !g.fenced {
		g.setFenced(true)
		g.byDeposition = true
	}
	g.known = true
}

// generation is taken before Postgres is asked whether it is fenced.
func (g *fenceGate) generation() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gen
}

// recordedState notes the shard's recorded primary: deposed says it is
// another instance; revision is the state's etcd revision.
func (g *fenceGate) recordedState(r recordedPrimary, deposed bool, revision int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.recordLocked(r, deposed, revision)
}

// recordLocked is recordedState with mu held.
func (g *fenceGate) recordLocked(r recordedPrimary, deposed bool, revision int64) {
	if r != g.recorded {
		g.sawReplica = false
	}
	g.recorded, g.deposed, g.revision = r, deposed, revision
}

// observed applies what a running Postgres said about itself, unless an
// operation set the gate since gen was taken. An observation never opens
// a known gate (one taken while Fence runs may predate Postgres's own
// fence), except one closed only because the instance was a deposed
// primary, once Postgres runs in recovery without a fence of its own.
// It closes an open one when Postgres is fenced behind the sidecar's
// back (pgmanager used directly), and when Postgres runs as a primary
// while the shard's state names another instance, and has since that
// state was recorded (depose.go): then it returns true if Postgres is not
// fenced yet, for the caller to fence it.
func (g *fenceGate) observed(gen uint64, ps pgmanager.Status) (fencePostgres bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ps.Role == pgmanager.RoleReplica {
		g.sawReplica = true
	}
	if g.gen != gen {
		return false
	}
	if g.deposed && ps.Role == pgmanager.RolePrimary && !g.sawReplica {
		g.deposeLocked()
		return !ps.Fenced
	}
	if g.byDeposition && ps.Role == pgmanager.RoleReplica && !ps.Fenced {
		g.setFenced(false)
		g.byDeposition = false
		return false
	}
	if !g.known || ps.Fenced {
		g.setFenced(ps.Fenced)
		g.known = true
		g.byDeposition = false
	}
	return false
}

// errFenced is what every client batch gets while the gate is closed.
func (s *Server) errFenced() error {
	if s.fence.onlyIsolated() {
		return pgerr.New("57P03", "instance %s of shard %s is cut off from the topology service: it runs no statements until it reaches it again",
			s.cfg.InstanceID, s.cfg.ShardUID)
	}
	return pgerr.New("57P03", "instance %s of shard %s is fenced: it runs no statements while its shard's primary changes",
		s.cfg.InstanceID, s.cfg.ShardUID)
}

// refuseFenced answers a batch with errFenced. b, the connection the batch
// was to run on, and the session's pinned one are closed: the fence
// terminates their backends, and with them any transaction or COPY the
// session had open.
func (sess *session) refuseFenced(b *backend) error {
	for _, c := range []*backend{b, sess.pinned} {
		if c != nil && !c.broken {
			c.close()
			sess.release(c)
		}
	}
	sess.copyIn = false
	return sess.reply(pgwire.AppendReadyForQuery(appendError(nil, sess.srv.errFenced()), 'I'), 'I')
}
