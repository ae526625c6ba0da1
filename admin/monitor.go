package admin

import (
	"context"
	"log/slog"
	"sort"
	"sync"
	"time"

	"github.com/tesseradb/tessera/sidecar"
	"github.com/tesseradb/tessera/sidecar/healthwatch"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store"
)

// monitor keeps the observations Decide needs: every registered
// sidecar's health (one goroutine each following its Health stream),
// the replication status of those reporting primary, and every stored
// ShardState. Every admin runs one, leader or not, so that a new leader
// decides on observations that are already current.
type monitor struct {
	store      *store.Store
	dial       sidecar.DialOptions
	staleAfter time.Duration
	statusTick time.Duration
	log        *slog.Logger

	mu        sync.Mutex
	instances map[string]*watched // by instance id
	states    map[string]store.ShardState
	// missing holds when each recorded primary the monitor has never
	// seen was first noticed, to time its absence.
	missing     map[string]time.Time
	haveRecords bool
	haveStates  bool

	wg sync.WaitGroup
}

// watched is one instance and the goroutines following it.
type watched struct {
	rec        store.Record
	registered bool
	reachable  bool
	serving    bool
	role       string
	since      time.Time
	repl       *Replication
	client     *sidecar.Client // the open stream's connection, for Status
	stop       context.CancelFunc
}

func (w *watched) up() bool { return w.reachable && w.serving }

func newMonitor(s *store.Store, dial sidecar.DialOptions, staleAfter, statusTick time.Duration, log *slog.Logger) *monitor {
	return &monitor{
		store: s, dial: dial, staleAfter: staleAfter, statusTick: statusTick, log: log,
		instances: map[string]*watched{},
		states:    map[string]store.ShardState{},
		missing:   map[string]time.Time{},
	}
}

// run follows discovery and shard states until ctx ends, then waits for
// every goroutine it started.
func (m *monitor) run(ctx context.Context) error {
	defer m.wg.Wait()
	records, err := m.store.WatchRecords(ctx, store.KindSidecar)
	if err != nil {
		return err
	}
	states, err := m.store.WatchShardStates(ctx)
	if err != nil {
		return err
	}
	for {
		select {
		case list, ok := <-records:
			if !ok {
				return ctx.Err()
			}
			m.reconcile(ctx, list)
		case list, ok := <-states:
			if !ok {
				return ctx.Err()
			}
			m.mu.Lock()
			clear(m.states)
			for _, st := range list {
				m.states[st.Shard] = st
			}
			m.haveStates = true
			m.mu.Unlock()
		}
	}
}

// reconcile starts following new sidecars, restarts those whose address
// changed, and marks vanished ones down (their entry stays: a vanished
// primary must be seen as down, not forgotten).
func (m *monitor) reconcile(ctx context.Context, list []store.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.haveRecords = true
	now := time.Now()
	seen := map[string]bool{}
	for _, rec := range list {
		seen[rec.InstanceID] = true
		w := m.instances[rec.InstanceID]
		if w == nil {
			// Down until its stream says otherwise: an instance that
			// never answers is failed over a window after it appeared.
			w = &watched{since: now, role: rec.Role}
			if first, ok := m.missing[rec.InstanceID]; ok {
				w.since = first
				delete(m.missing, rec.InstanceID)
			}
			m.instances[rec.InstanceID] = w
		}
		restart := !w.registered || w.rec.GRPCAddr != rec.GRPCAddr
		if !w.reachable {
			w.role = rec.Role
		}
		w.rec, w.registered = rec, true
		if restart {
			m.follow(ctx, w)
		}
	}
	for id, w := range m.instances {
		if seen[id] || !w.registered {
			continue
		}
		m.log.Info("sidecar deregistered", "instance", id, "shard", w.rec.ShardUID)
		w.stop()
		w.registered = false
		m.setHealth(w, false, w.serving, now)
	}
}

// follow starts the goroutines of w, stopping earlier ones. m.mu is held.
func (m *monitor) follow(ctx context.Context, w *watched) {
	if w.stop != nil {
		w.stop()
	}
	wctx, cancel := context.WithCancel(ctx)
	w.stop = cancel
	id, addr := w.rec.InstanceID, w.rec.GRPCAddr
	m.wg.Add(2)
	go func() { defer m.wg.Done(); m.followHealth(wctx, id, addr) }()
	go func() { defer m.wg.Done(); m.pollStatus(wctx, id) }()
}

// followHealth follows the sidecar at addr's Health stream
// (healthwatch: a fresh connection per attempt, staleness, bounded
// retry) until ctx ends.
func (m *monitor) followHealth(ctx context.Context, id, addr string) {
	healthwatch.Follow(ctx, healthwatch.Config{Addr: addr, Dial: m.dial, StaleAfter: m.staleAfter}, healthFollower{m, id, ctx})
}

// healthFollower records what one instance's Health stream says.
type healthFollower struct {
	m   *monitor
	id  string
	ctx context.Context // ends when the monitor stops following id at this address
}

func (f healthFollower) Status(h *pb.HealthStatus, c *sidecar.Client) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if w := f.m.instances[f.id]; w != nil && f.ctx.Err() == nil {
		w.client = c
		if h.Role != "" {
			w.role = h.Role
		}
		f.m.setHealth(w, true, h.Serving, time.Now())
	}
}

func (f healthFollower) Lost(error) {
	f.m.mu.Lock()
	defer f.m.mu.Unlock()
	if w := f.m.instances[f.id]; w != nil && f.ctx.Err() == nil {
		w.client = nil
		f.m.setHealth(w, false, w.serving, time.Now())
	}
}

// setHealth records reachability and serving, restarting the up/down
// clock when Up changes. m.mu is held.
func (m *monitor) setHealth(w *watched, reachable, serving bool, now time.Time) {
	wasUp := w.up()
	w.reachable, w.serving = reachable, serving
	if w.up() != wasUp {
		w.since = now
		m.log.Info("instance health changed", "instance", w.rec.InstanceID, "shard", w.rec.ShardUID, "up", w.up())
	}
}

// pollStatus asks the sidecar for its replication status every
// statusTick while it reports primary.
func (m *monitor) pollStatus(ctx context.Context, id string) {
	tick := time.NewTicker(m.statusTick)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		m.mu.Lock()
		w := m.instances[id]
		var c *sidecar.Client
		if w != nil && w.up() && w.role == store.RolePrimary {
			c = w.client
		}
		m.mu.Unlock()
		if c == nil {
			continue
		}
		at := time.Now()
		sctx, cancel := context.WithTimeout(ctx, m.statusTick+time.Second)
		st, err := c.Status(sctx, &pb.StatusRequest{})
		cancel()
		if err != nil || st.Health.GetError() != "" {
			continue
		}
		rep := &Replication{At: at, SynchronousStandbyNames: st.SynchronousStandbyNames}
		for _, r := range st.Replicas {
			if r.State == "streaming" {
				rep.Streaming = append(rep.Streaming, r.ApplicationName)
			}
		}
		m.mu.Lock()
		w.repl = rep
		m.mu.Unlock()
	}
}

// snapshot returns the observations by shard, in shard order, or false
// until the first discovery and shard-state lists have arrived.
// Deregistered instances are kept only while they are their shard's
// recorded primary.
func (m *monitor) snapshot(now time.Time) ([]Shard, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.haveRecords || !m.haveStates {
		return nil, false
	}
	byShard := map[string]*Shard{}
	shard := func(uid string) *Shard {
		if byShard[uid] == nil {
			byShard[uid] = &Shard{UID: uid}
		}
		return byShard[uid]
	}
	for uid, st := range m.states {
		sh := shard(uid)
		st := st
		sh.State = &st
	}
	for id, w := range m.instances {
		sh := shard(w.rec.ShardUID)
		if !w.registered && (sh.State == nil || sh.State.Primary != id) {
			delete(m.instances, id)
			continue
		}
		in := Instance{ID: id, Zone: w.rec.Zone, Role: w.role, Registered: w.registered, Reachable: w.reachable,
			Serving: w.serving, Since: w.since}
		if w.repl != nil && w.role == store.RolePrimary {
			rep := *w.repl
			in.Replication = &rep
		}
		sh.Instances = append(sh.Instances, in)
	}
	stillMissing := map[string]bool{}
	for _, sh := range byShard {
		if sh.State == nil || sh.State.Primary == "" || find(sh.Instances, sh.State.Primary) != nil {
			continue
		}
		id := sh.State.Primary
		if _, ok := m.missing[id]; !ok {
			m.missing[id] = now
		}
		stillMissing[id] = true
		sh.Instances = append(sh.Instances, Instance{ID: id, Since: m.missing[id]})
	}
	for id := range m.missing {
		if !stillMissing[id] {
			delete(m.missing, id)
		}
	}
	out := make([]Shard, 0, len(byShard))
	for _, sh := range byShard {
		sort.Slice(sh.Instances, func(i, j int) bool { return sh.Instances[i].ID < sh.Instances[j].ID })
		out = append(out, *sh)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].UID < out[j].UID })
	return out, true
}
