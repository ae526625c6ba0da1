package router

import (
	"context"
	"crypto/tls"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/sidecar"
	"github.com/tesseradb/tessera/sidecar/healthwatch"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store"
)

// shards knows the sidecars of every shard, from the service-discovery
// records in the topology service, keeps one gRPC connection and one
// health stream to each, and follows the control plane's shard states,
// which name each shard's primary.
type shards struct {
	secret string
	tls    *tls.Config
	// inProcess lets sessions on sidecars of this process go by call.
	inProcess bool

	mu        sync.RWMutex
	instances map[string]*instance        // by instance id
	states    map[string]store.ShardState // by shard uid
	ready     chan struct{}               // closed once the first list arrived
	once      sync.Once

	// gen changes whenever the instances or the shard states change, so
	// a client session can tell cheaply whether the backend it holds may
	// no longer be the right one.
	gen atomic.Uint64
	// anyBuffering: some shard state carries a buffer signal.
	anyBuffering atomic.Bool
	// changed is closed and replaced at every change, waking statements
	// buffered for a new primary.
	changedMu sync.Mutex
	changed   chan struct{}
}

// instance is one sidecar the router can reach.
type instance struct {
	// rec is the instance's discovery record, replaced whole (never
	// changed in place) when the sidecar registers again: sessions read it
	// without the shards' lock (record).
	rec    atomic.Pointer[store.Record]
	client *sidecar.Client
	stop   context.CancelFunc // ends the health stream
	health atomic.Pointer[pb.HealthStatus]
	// healthAt is when the router received the latest health message,
	// by its own clock (unix milliseconds): the sidecar's clock may not
	// agree with the router's.
	healthAt atomic.Int64
	// socketFailedAt is when the sidecar's unix socket last failed to
	// open a session (unix nanoseconds, 0 never): sessions go by TCP for
	// socketRetry after that.
	socketFailedAt atomic.Int64
	// sessions are the router's sessions open on the instance, abandoned
	// when it is deposed or gone (abandon.go).
	sessions openSessions
}

// record is the instance's latest discovery record.
func (in *instance) record() *store.Record { return in.rec.Load() }

// socketRetry is how long a router that could not reach a sidecar by its
// unix socket (another machine's path, or a sidecar restarting) uses TCP
// before it tries the socket again.
const socketRetry = 30 * time.Second

func (in *instance) socketUsable(now time.Time) bool {
	at := in.socketFailedAt.Load()
	return at == 0 || now.Sub(time.Unix(0, at)) >= socketRetry
}

func (in *instance) socketFailed(now time.Time) { in.socketFailedAt.Store(now.UnixNano()) }

func newShards(secret string, tlsConfig *tls.Config, inProcess bool) *shards {
	return &shards{secret: secret, tls: tlsConfig, inProcess: inProcess, instances: map[string]*instance{}, states: map[string]store.ShardState{},
		ready: make(chan struct{}), changed: make(chan struct{})}
}

// follow keeps the instance list and shard states current until ctx ends.
func (s *shards) follow(ctx context.Context, st *store.Store) error {
	updates, err := st.WatchRecords(ctx, store.KindSidecar)
	if err != nil {
		return err
	}
	states, err := st.WatchShardStates(ctx)
	if err != nil {
		return err
	}
	go func() {
		for recs := range updates {
			s.update(ctx, recs)
		}
		s.closeAll()
	}()
	go func() {
		for list := range states {
			s.mu.Lock()
			// Primaries the new states replace: their sessions are
			// abandoned (abandon.go) before anyone hears of the change.
			var deposed []*instance
			for _, st := range list {
				if old := s.states[st.Shard].Primary; old != "" && old != st.Primary && s.instances[old] != nil {
					deposed = append(deposed, s.instances[old])
				}
			}
			clear(s.states)
			signal := false
			for _, st := range list {
				s.states[st.Shard] = st
				signal = signal || st.Buffer != nil
			}
			s.anyBuffering.Store(signal)
			s.mu.Unlock()
			for _, in := range deposed {
				in.sessions.abandon()
			}
			s.bump()
		}
	}()
	return nil
}

// bump records a change and wakes whoever waits for one.
func (s *shards) bump() {
	s.gen.Add(1)
	s.changedMu.Lock()
	close(s.changed)
	s.changed = make(chan struct{})
	s.changedMu.Unlock()
}

// changes returns a channel closed at the next change.
func (s *shards) changes() <-chan struct{} {
	s.changedMu.Lock()
	defer s.changedMu.Unlock()
	return s.changed
}

func (s *shards) update(ctx context.Context, recs []store.Record) {
	s.mu.Lock()
	seen := map[string]bool{}
	for _, rec := range recs {
		seen[rec.InstanceID] = true
		cur := s.instances[rec.InstanceID]
		if cur != nil && cur.record().GRPCAddr == rec.GRPCAddr {
			cur.rec.Store(&rec)
			continue
		}
		if cur != nil {
			// Registered again at another address: the sessions held
			// at the old one lead nowhere.
			cur.close()
			cur.sessions.abandon()
		}
		client, err := sidecar.Dial(rec.GRPCAddr, s.dialOptions())
		if err != nil {
			continue
		}
		in := &instance{client: client}
		in.rec.Store(&rec)
		hctx, stop := context.WithCancel(ctx)
		in.stop = stop
		go in.watchHealth(hctx, s.dialOptions(), s.bump)
		s.instances[rec.InstanceID] = in
	}
	for id, in := range s.instances {
		if !seen[id] {
			in.close()
			in.sessions.abandon()
			delete(s.instances, id)
		}
	}
	s.mu.Unlock()
	s.bump()
	s.once.Do(func() { close(s.ready) })
}

func (in *instance) close() {
	in.stop()
	in.client.Close()
}

// watchHealth keeps in.health current from the sidecar's health stream
// (healthwatch: staleness, a fresh connection per attempt), calling
// changed when serving or writability flips. While the stream is broken
// or silent the instance counts as unhealthy.
func (in *instance) watchHealth(ctx context.Context, dial sidecar.DialOptions, changed func()) {
	healthwatch.Follow(ctx, healthwatch.Config{Addr: in.record().GRPCAddr, Dial: dial}, healthFollower{in, changed})
}

// healthFollower records what an instance's Health stream says.
type healthFollower struct {
	in      *instance
	changed func()
}

func (f healthFollower) Status(h *pb.HealthStatus, _ *sidecar.Client) {
	f.in.healthAt.Store(time.Now().UnixMilli())
	prev := f.in.health.Swap(h)
	if prev == nil || prev.Serving != h.Serving || prev.Writable != h.Writable || prev.DiskLow != h.DiskLow {
		f.changed()
	}
}

func (f healthFollower) Lost(err error) {
	if prev := f.in.health.Swap(&pb.HealthStatus{Error: "health stream: " + err.Error()}); prev == nil || prev.Serving {
		f.changed()
	}
}

// diskLow reports whether the instance last said its disk is low.
func (in *instance) diskLow() bool {
	h := in.health.Load()
	return h != nil && h.DiskLow
}

func (s *shards) dialOptions() sidecar.DialOptions {
	return sidecar.DialOptions{Secret: s.secret, TLS: s.tls, InProcess: s.inProcess}
}

func (s *shards) closeAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for id, in := range s.instances {
		in.close()
		delete(s.instances, id)
	}
}

// all returns every instance known now.
func (s *shards) all() []*instance {
	s.mu.RLock()
	defer s.mu.RUnlock()
	out := make([]*instance, 0, len(s.instances))
	for _, in := range s.instances {
		out = append(out, in)
	}
	return out
}

// state returns the shard's control-plane state, if one is stored.
func (s *shards) state(shard string) (store.ShardState, bool) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, ok := s.states[shard]
	return st, ok
}

// pick returns the shard's primary, or a replica when replica is set.
// The primary is the one the shard state names; only when none is stored
// (a cluster no control plane has touched yet) does an instance's own
// word count. Reads sent to replicas never fall back to the primary and
// prefer replicas that are serving.
func (s *shards) pick(shard string, replica bool) (*instance, error) {
	s.mu.RLock()
	defer s.mu.RUnlock()
	st, recorded := s.states[shard]
	recorded = recorded && st.Primary != ""
	if !replica && recorded {
		if in := s.instances[st.Primary]; in != nil && in.record().ShardUID == shard {
			return in, nil
		}
		return nil, pgerr.New("08006", "shard %s: its primary %s is unavailable", shard, st.Primary)
	}
	var candidates []*instance
	for _, in := range s.instances {
		if in.record().ShardUID != shard {
			continue
		}
		isPrimary := in.record().Role == store.RolePrimary
		if recorded {
			isPrimary = in.record().InstanceID == st.Primary
		}
		if isPrimary != replica {
			candidates = append(candidates, in)
		}
	}
	if len(candidates) == 0 {
		role := "primary"
		if replica {
			role = "replica"
		}
		return nil, pgerr.New("08006", "shard %s has no %s available", shard, role)
	}
	sort.Slice(candidates, func(i, j int) bool {
		si, sj := candidates[i].serving(), candidates[j].serving()
		if si != sj {
			return si
		}
		return candidates[i].record().InstanceID < candidates[j].record().InstanceID
	})
	return candidates[0], nil
}

// writable reports whether the instance last said it takes writes; an
// instance not heard from yet is taken at its word (its record's role).
func (in *instance) writable() bool {
	h := in.health.Load()
	if h == nil {
		return in.record().Role == store.RolePrimary
	}
	return h.Writable
}

func (in *instance) serving() bool {
	h := in.health.Load()
	return h != nil && h.Serving
}
