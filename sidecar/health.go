package sidecar

import (
	"context"
	"sync"
	"syscall"
	"time"

	"github.com/tesseradb/tessera/pgmanager"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// health holds the latest observation and the Health streams subscribed
// to it. The monitor goroutine (Server.monitor) is the only writer.
type health struct {
	mu          sync.Mutex
	current     *pb.HealthStatus
	publishedAt time.Time // when current was published, by this clock
	subs        map[chan *pb.HealthStatus]struct{}
}

// subscribe returns a channel that always holds the newest status: a slow
// reader skips stale ones rather than holding the monitor up.
func (h *health) subscribe() (chan *pb.HealthStatus, func()) {
	ch := make(chan *pb.HealthStatus, 1)
	h.mu.Lock()
	if h.subs == nil {
		h.subs = map[chan *pb.HealthStatus]struct{}{}
	}
	h.subs[ch] = struct{}{}
	if h.current != nil {
		ch <- h.current
	}
	h.mu.Unlock()
	return ch, func() {
		h.mu.Lock()
		delete(h.subs, ch)
		h.mu.Unlock()
	}
}

func (h *health) publish(st *pb.HealthStatus) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.current, h.publishedAt = st, time.Now()
	for ch := range h.subs {
		select {
		case <-ch:
		default:
		}
		ch <- st
	}
}

func (h *health) latest() *pb.HealthStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.current
}

// recentFailure returns the latest observation if it found Postgres not
// answering and was published within the last within.
func (h *health) recentFailure(within time.Duration) *pb.HealthStatus {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.current == nil || h.current.Error == "" || time.Since(h.publishedAt) > within {
		return nil
	}
	return h.current
}

// changed reports whether b differs from a in anything but progress:
// LSNs, lag and time move all the time and go out with the heartbeat.
func changed(a, b *pb.HealthStatus) bool {
	if a == nil {
		return true
	}
	return a.Serving != b.Serving || a.Role != b.Role || a.Writable != b.Writable || a.Fenced != b.Fenced ||
		a.DiskLow != b.DiskLow || a.Timeline != b.Timeline || a.Error != b.Error
}

// monitor observes the instance every HealthInterval and publishes on
// change and at least every HeartbeatInterval, until ctx ends.
func (s *Server) monitor(ctx context.Context) {
	tick := time.NewTicker(s.cfg.HealthInterval)
	defer tick.Stop()
	var lastSent time.Time
	for {
		st := s.observe(ctx)
		prev := s.health.latest()
		if changed(prev, st) || time.Since(lastSent) >= s.cfg.HeartbeatInterval {
			s.health.publish(st)
			lastSent = time.Now()
			if prev == nil || prev.Role != st.Role {
				s.roleChanged(ctx, st.Role)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		case <-s.healthKick:
		}
	}
}

// observe reads the instance's state.
func (s *Server) observe(ctx context.Context) *pb.HealthStatus {
	st, _, _ := s.observeStatus(ctx)
	return st
}

// observeStatus is observe that also returns what Postgres said, or an
// error when it said nothing, so that an operation's answer
// (instanceStatus) takes one look at Postgres rather than two: each look
// is a connection of its own, and a switchover's steps wait on them.
func (s *Server) observeStatus(ctx context.Context) (*pb.HealthStatus, pgmanager.Status, error) {
	st := &pb.HealthStatus{
		InstanceId:     s.cfg.InstanceID,
		ShardUid:       s.cfg.ShardUID,
		ObservedUnixMs: time.Now().UnixMilli(),
	}
	if prev := s.health.latest(); prev != nil {
		st.Role = prev.Role // keep the last known role while Postgres is down
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(s.cfg.Manager.DataDir(), &fs); err == nil {
		st.DiskFreeBytes = fs.Bavail * uint64(fs.Bsize)
		st.DiskLow = st.DiskFreeBytes < s.cfg.LowDiskBytes
	}
	ctx, cancel := context.WithTimeout(ctx, s.observeTimeout())
	defer cancel()
	gen := s.fence.generation()
	ps, err := s.cfg.Manager.Status(ctx)
	if err != nil {
		st.Error = err.Error()
		return st, ps, err
	}
	if ps.Running && s.fence.observed(gen, ps) {
		s.kickDepose()
	}
	fillHealth(st, ps, s.fence.closed.Load())
	return st, ps, nil
}

// observeTimeout bounds one look at Postgres: longer, and it does not
// answer.
func (s *Server) observeTimeout() time.Duration { return s.cfg.HealthInterval + time.Second }

// fillHealth reports ps; gateClosed is the sidecar's own fence, which
// refuses client batches whatever Postgres says (fence.go).
func fillHealth(st *pb.HealthStatus, ps pgmanager.Status, gateClosed bool) {
	st.Serving = ps.Running
	if ps.Role != "" {
		st.Role = string(ps.Role)
	}
	st.Fenced = ps.Fenced || gateClosed
	st.Writable = ps.Running && ps.Role == pgmanager.RolePrimary && !st.Fenced && !st.DiskLow
	st.Timeline = int32(ps.Timeline)
	st.CurrentLsn = ps.CurrentLSN.String()
	st.ReceiveLsn = ps.ReceiveLSN.String()
	st.ReplayLsn = ps.ReplayLSN.String()
	if ps.Role == pgmanager.RoleReplica && ps.ReceiveLSN > ps.ReplayLSN {
		st.LagBytes = uint64(ps.ReceiveLSN - ps.ReplayLSN)
	}
	st.ReplayLagMs = ps.ReplayLag.Milliseconds()
}

// Health implements the Health RPC.
func (s *Server) Health(_ *pb.HealthRequest, stream pb.Sidecar_HealthServer) error {
	ch, unsubscribe := s.health.subscribe()
	defer unsubscribe()
	for {
		select {
		case <-stream.Context().Done():
			return nil
		case <-s.stopping:
			return nil
		case st := <-ch:
			// Published statuses are never modified, so streams share them.
			if err := stream.Send(st); err != nil {
				return err
			}
		}
	}
}

// LatestHealth returns the newest health observation.
func (s *Server) LatestHealth() *pb.HealthStatus { return s.health.latest() }

// kickHealth asks the monitor to look again now (after an operation).
func (s *Server) kickHealth() {
	select {
	case s.healthKick <- struct{}{}:
	default:
	}
}
