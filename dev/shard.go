package dev

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"github.com/tesseradb/tessera/pgmanager"
	"github.com/tesseradb/tessera/sidecar"
)

// shard is one running shard: a primary and its replicas.
type shard struct {
	uid       string
	instances []*instance
}

// instance is one Postgres instance under pgmanager with its sidecar.
type instance struct {
	id          string
	zone        string
	port        int
	sidecarAddr string
	pg          *pgmanager.Instance
	sc          *sidecar.Server
}

func (sh *shard) info() ShardInfo {
	out := ShardInfo{UID: sh.uid}
	for _, in := range sh.instances {
		role := ""
		if in.sc != nil {
			if h := in.sc.LatestHealth(); h != nil {
				role = h.Role
			}
		}
		out.Instances = append(out.Instances, InstanceInfo{ID: in.id, Role: role, Host: "127.0.0.1", Port: in.port, Sidecar: in.sidecarAddr})
	}
	return out
}

// stop stops sidecars first (they hold connections), then Postgres.
func (sh *shard) stop(ctx context.Context) error {
	var errs []error
	for i := len(sh.instances) - 1; i >= 0; i-- {
		in := sh.instances[i]
		if in.sc != nil {
			in.sc.Stop(ctx)
		}
		if in.pg != nil {
			if err := in.pg.Close(ctx); err != nil {
				errs = append(errs, fmt.Errorf("%s: %w", in.id, err))
			}
		}
	}
	return errors.Join(errs...)
}

// startShard starts (creating it first if it is new) a shard with a
// primary and replicas replicas, and registers it.
func (c *Cluster) startShard(ctx context.Context, uid string, replicas int) (err error) {
	if !shardName.MatchString(uid) {
		return fmt.Errorf("shard name %q: use lower-case letters, digits, '-' and '_'", uid)
	}
	c.mu.Lock()
	if c.shards[uid] != nil {
		c.mu.Unlock()
		return fmt.Errorf("shard %s already runs", uid)
	}
	sh := &shard{uid: uid}
	c.shards[uid] = sh
	isNew := c.known(uid) == nil
	infos := c.instanceInfos(uid, replicas)
	c.mu.Unlock()
	defer func() {
		if err != nil {
			sh.stop(context.WithoutCancel(ctx))
			c.mu.Lock()
			delete(c.shards, uid)
			if isNew {
				c.forget(uid)
			}
			c.mu.Unlock()
		}
	}()

	for i, ii := range infos {
		pg, err := pgmanager.New(pgmanager.Config{
			InstanceID:        ii.ID,
			Dir:               filepath.Join(c.cfg.DataDir, "shards", uid, ii.ID),
			Port:              ii.Port,
			BinDir:            c.cfg.BinDir,
			SuperuserPassword: c.cfg.Password,
			Logger:            c.log,
			RestartOnCrash:    true,
		})
		if err != nil {
			return err
		}
		sh.instances = append(sh.instances, &instance{id: ii.ID, zone: zone(i), port: ii.Port, sidecarAddr: ii.Sidecar, pg: pg})
	}

	primary := primaryOf(sh.instances)
	order := append([]*instance{primary}, without(sh.instances, primary)...)
	primaryEndpoint := pgmanager.Endpoint{Host: "127.0.0.1", Port: primary.port}
	for _, in := range order {
		switch {
		case in.pg.Initialized():
		case in == primary:
			if err := in.pg.InitPrimary(ctx); err != nil {
				return fmt.Errorf("%s: %w", in.id, err)
			}
		default:
			if err := in.pg.InitReplica(ctx, primaryEndpoint); err != nil {
				return fmt.Errorf("%s: %w", in.id, err)
			}
		}
		if err := in.pg.Start(ctx); err != nil {
			return fmt.Errorf("%s: %w", in.id, err)
		}
		if err := c.startSidecar(ctx, uid, in); err != nil {
			return fmt.Errorf("%s sidecar: %w", in.id, err)
		}
	}
	c.log.Info("shard up", "shard", uid, "instances", len(sh.instances))
	return nil
}

// instanceInfos returns the shard's known instances, or allocates new
// ones on free ports and records them, so that shards started at the same
// time never share a port. c.mu must be held.
func (c *Cluster) instanceInfos(uid string, replicas int) []InstanceInfo {
	if known := c.known(uid); known != nil && len(known.Instances) > 0 {
		return known.Instances
	}
	used := map[int]bool{}
	for _, s := range c.info.Shards {
		for _, in := range s.Instances {
			used[in.Port] = true
		}
	}
	var out []InstanceInfo
	port := c.cfg.BasePort
	for i := 0; i <= replicas; i++ {
		for used[port] || !portFree(port) {
			port++
		}
		used[port] = true
		out = append(out, InstanceInfo{ID: uid + "-" + strconv.Itoa(i), Host: "127.0.0.1", Port: port})
	}
	c.forget(uid)
	c.info.Shards = append(c.info.Shards, ShardInfo{UID: uid, Instances: out})
	return out
}

// forget drops a shard from the recorded state. c.mu must be held.
func (c *Cluster) forget(uid string) {
	for i := range c.info.Shards {
		if c.info.Shards[i].UID == uid {
			c.info.Shards = append(c.info.Shards[:i], c.info.Shards[i+1:]...)
			return
		}
	}
}

// primaryOf picks the instance whose data directory is not a standby's,
// or the first when none is initialized yet.
func primaryOf(instances []*instance) *instance {
	for _, in := range instances {
		if !in.pg.Initialized() {
			continue
		}
		if _, err := os.Stat(filepath.Join(in.pg.DataDir(), "standby.signal")); errors.Is(err, os.ErrNotExist) {
			return in
		}
	}
	return instances[0]
}

func without(list []*instance, x *instance) []*instance {
	var out []*instance
	for _, in := range list {
		if in != x {
			out = append(out, in)
		}
	}
	return out
}

// zone is the availability zone dev gives a shard's i-th instance:
// zone-a, zone-b, ..., so that cross_zone_sync has zones to tell apart.
func zone(i int) string { return "zone-" + string(rune('a'+i%26)) }

// healthInterval is how often dev's sidecars look at Postgres: often, so
// that the admin sees a dead primary soon after it dies.
const healthInterval = 250 * time.Millisecond

// maxSocketPath bounds a unix socket's path (the kernel's limit is 107
// bytes).
const maxSocketPath = 100

func (c *Cluster) startSidecar(ctx context.Context, uid string, in *instance) error {
	addr := in.sidecarAddr
	if addr == "" || !addrFree(addr) {
		addr = "127.0.0.1:0"
	}
	// Routers on this machine (all of dev's) reach the sidecar by a unix
	// socket beside the instance's data; pgmanager keeps that directory's
	// paths short enough for one.
	socket, err := filepath.Abs(filepath.Join(filepath.Dir(in.pg.DataDir()), "sidecar.sock"))
	if err != nil {
		return err
	}
	if len(socket) > maxSocketPath {
		socket = "" // too long for a unix socket: routers use TCP
	}
	pool := sidecar.DefaultPoolConfig
	if c.cfg.PipelineConns != 0 {
		pool.PipelineConns = max(c.cfg.PipelineConns, 0)
	}
	sc, err := sidecar.New(sidecar.Config{
		ShardUID:   uid,
		InstanceID: in.id,
		Zone:       in.zone,
		ListenAddr: addr,
		// The framed session port is the routers' fast path.
		SessionListenAddr: "127.0.0.1:0",
		SessionSocket:     socket,
		PostgresAddr:      net.JoinHostPort("127.0.0.1", strconv.Itoa(in.port)),
		Secret:            c.secret,
		Manager:           in.pg,
		Store:             c.store,
		Logger:            c.log,
		HealthInterval:    healthInterval,
		LowDiskBytes:      c.cfg.LowDiskBytes,
		Pool:              pool,
	})
	if err != nil {
		return err
	}
	if err := sc.Start(ctx); err != nil {
		return err
	}
	in.sc, in.sidecarAddr = sc, sc.Addr()
	return nil
}

func addrFree(addr string) bool {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return false
	}
	l.Close()
	return true
}

// CreateShard adds a shard with a primary and replicas to the running
// cluster (Reshard needs new shards to move rows to).
func (c *Cluster) CreateShard(ctx context.Context, uid string, replicas int) (ShardInfo, error) {
	// Checked here too: a request may come from elsewhere than RequestShard.
	if err := CheckReplicas(replicas); err != nil {
		return ShardInfo{}, err
	}
	if err := c.startShard(ctx, uid, replicas); err != nil {
		return ShardInfo{}, err
	}
	if err := c.startReplicator(ctx, uid); err != nil {
		return ShardInfo{}, err
	}
	if err := c.save(); err != nil {
		return ShardInfo{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.shards[uid].info(), nil
}
