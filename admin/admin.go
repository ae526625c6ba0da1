package admin

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/tesseradb/tessera/sidecar"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/workflows"
)

// Starter starts the workflows the leader decides on. Each start must be
// idempotent while a workflow of the same id runs (the Temporal starter
// uses one id per shard, or per instance for rejoins, and attaches to a
// running one), so a repeated decision never runs an operation twice.
type Starter interface {
	Failover(ctx context.Context, shard, reason string) error
	Rejoin(ctx context.Context, shard, instance string) error
	Repair(ctx context.Context, shard string) error
	// Busy lists the shard's operations under way, by ActionKind name
	// or "switchover".
	Busy(ctx context.Context, shard string) ([]string, error)
}

// Config configures an admin; New validates it.
type Config struct {
	Store  *store.Store
	Secret string // the cluster credential sidecars require
	TLS    *tls.Config
	// Starter starts workflows; see NewTemporalStarter.
	Starter Starter
	// ID names this admin in the election; default host-pid.
	ID string
	// DetectWindow: how long a primary must be down before it is failed
	// over (default 1.5s; the kill-to-writable budget is 5s).
	DetectWindow time.Duration
	// Grace: how long instances must be up before a replication
	// mismatch counts (default 5s).
	Grace time.Duration
	// RetryInterval: the least time between two starts of the same
	// failover or rejoin (default 3s); RepairInterval the same for a
	// shard's repairs (default 10s).
	RetryInterval, RepairInterval time.Duration
	// SessionTTL: how long a leader cut off from etcd keeps leadership
	// (default 5s, whole seconds).
	SessionTTL time.Duration
	// StaleAfter: a Health stream silent this long counts as broken
	// (default 5s; sidecars send at least every 2s).
	StaleAfter time.Duration
	// StatusInterval: how often primaries' replication status is read
	// (default 1s).
	StatusInterval time.Duration
	Logger         *slog.Logger
}

// tick is how often the leader decides: it bounds how much later than
// DetectWindow a failover starts.
const tick = 100 * time.Millisecond

func (c Config) withDefaults() (Config, error) {
	if c.ID == "" {
		host, _ := os.Hostname()
		c.ID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&c.DetectWindow, 1500*time.Millisecond)
	def(&c.Grace, 5*time.Second)
	def(&c.RetryInterval, 3*time.Second)
	def(&c.RepairInterval, 10*time.Second)
	def(&c.SessionTTL, 5*time.Second)
	def(&c.StaleAfter, 5*time.Second)
	def(&c.StatusInterval, time.Second)
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	var errs []error
	if c.Store == nil {
		errs = append(errs, errors.New("admin: a topology store is required"))
	}
	if c.Starter == nil {
		errs = append(errs, errors.New("admin: a workflow starter is required"))
	}
	if c.Secret == "" {
		errs = append(errs, errors.New("admin: the cluster secret is required"))
	}
	if strings.Contains(c.ID, "/") {
		errs = append(errs, fmt.Errorf("admin: id %q contains '/'", c.ID))
	}
	for name, d := range map[string]time.Duration{"detect window": c.DetectWindow, "grace": c.Grace,
		"retry interval": c.RetryInterval, "repair interval": c.RepairInterval, "stale-after": c.StaleAfter,
		"status interval": c.StatusInterval} {
		if d < 0 {
			errs = append(errs, fmt.Errorf("admin: %s %s is negative", name, d))
		}
	}
	if c.SessionTTL < time.Second {
		errs = append(errs, fmt.Errorf("admin: session TTL %s is under a second", c.SessionTTL))
	}
	return c, errors.Join(errs...)
}

// Admin is one health monitor and recovery-leadership candidate.
type Admin struct {
	cfg    Config
	log    *slog.Logger
	mon    *monitor
	leader atomic.Bool

	mu       sync.Mutex // guards last and inflight
	last     map[Action]time.Time
	inflight map[Action]bool
}

// New validates cfg and returns an admin; Run runs it.
func New(cfg Config) (*Admin, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	log := cfg.Logger.With("admin", cfg.ID)
	return &Admin{
		cfg:      cfg,
		log:      log,
		mon:      newMonitor(cfg.Store, sidecar.DialOptions{Secret: cfg.Secret, TLS: cfg.TLS}, cfg.StaleAfter, cfg.StatusInterval, log),
		last:     map[Action]time.Time{},
		inflight: map[Action]bool{},
	}, nil
}

// Leader reports whether this admin holds recovery leadership now.
func (a *Admin) Leader() bool { return a.leader.Load() }

// Run monitors, campaigns for leadership and, while leader, acts, until
// ctx ends. It returns nil after ctx ends, having resigned and stopped
// everything it started.
func (a *Admin) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	monErr := make(chan error, 1)
	go func() { monErr <- a.mon.run(ctx) }()
	a.campaign(ctx)
	cancel()
	if err := <-monErr; err != nil && !errors.Is(err, context.Canceled) {
		return err
	}
	return nil
}

// lead decides every tick and starts what was decided, until ctx ends
// (leadership lost or the admin stopping); it waits for the starts it
// made.
func (a *Admin) lead(ctx context.Context) {
	var wg sync.WaitGroup
	defer wg.Wait()
	t := time.NewTicker(tick)
	defer t.Stop()
	policy := Policy{DetectWindow: a.cfg.DetectWindow, Grace: a.cfg.Grace}
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		shards, ok := a.mon.snapshot(now)
		if !ok {
			continue
		}
		for _, act := range Decide(now, shards, policy) {
			if !a.claim(act, now) {
				continue
			}
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer a.release(act)
				a.start(ctx, act)
			}()
		}
	}
}

// claim reports whether act may start now: not already being started,
// and not started within its retry interval. The reason is not part of
// the key, so a reworded decision is still a repeat.
func (a *Admin) claim(act Action, now time.Time) bool {
	key := Action{Kind: act.Kind, Shard: act.Shard, Instance: act.Instance}
	interval := a.cfg.RetryInterval
	if act.Kind == ActRepair {
		interval = a.cfg.RepairInterval
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.inflight[key] || now.Sub(a.last[key]) < interval {
		return false
	}
	a.inflight[key], a.last[key] = true, now
	return true
}

func (a *Admin) release(act Action) {
	a.mu.Lock()
	delete(a.inflight, Action{Kind: act.Kind, Shard: act.Shard, Instance: act.Instance})
	a.mu.Unlock()
}

// conflicts lists, for each action, the operations that must not run
// beside it. A failover waits only for a switchover (which may already
// be promoting); rejoins and repairs wait for anything that moves the
// primary or repoints replicas.
var conflicts = map[ActionKind][]string{
	ActFailover: {workflows.OpSwitchover},
	ActRejoin:   {workflows.OpSwitchover, workflows.OpFailover, workflows.OpRepair},
	ActRepair:   {workflows.OpSwitchover, workflows.OpFailover, workflows.OpRepair},
}

// start starts one decided workflow, unless a conflicting one runs.
func (a *Admin) start(ctx context.Context, act Action) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	log := a.log.With("action", act.Kind, "shard", act.Shard, "reason", act.Reason)
	if act.Instance != "" {
		log = log.With("instance", act.Instance)
	}
	busy, err := a.cfg.Starter.Busy(ctx, act.Shard)
	if err != nil {
		log.Warn("cannot tell which operations run; not starting", "err", err)
		return
	}
	for _, op := range busy {
		if slices.Contains(conflicts[act.Kind], op) {
			log.Info("not starting: another operation runs", "running", op)
			return
		}
	}
	switch act.Kind {
	case ActFailover:
		err = a.cfg.Starter.Failover(ctx, act.Shard, act.Reason)
	case ActRejoin:
		err = a.cfg.Starter.Rejoin(ctx, act.Shard, act.Instance)
	case ActRepair:
		err = a.cfg.Starter.Repair(ctx, act.Shard)
	}
	if err != nil {
		log.Warn("starting the workflow failed", "err", err)
		return
	}
	log.Info("workflow started")
}
