package sidecar

import (
	"context"
	"errors"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/pgmanager"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// Status implements the Status RPC.
func (s *Server) Status(ctx context.Context, _ *pb.StatusRequest) (*pb.InstanceStatus, error) {
	// A Postgres that did not answer the health monitor moments ago (a
	// hung primary) is not waited on again: a failover inspecting the
	// shard would spend the whole observe timeout here. The monitor keeps
	// looking with the full timeout, so a slow Postgres is not cut short,
	// and the operations' answers look afresh (instanceStatus).
	if h := s.health.recentFailure(2 * s.observeTimeout()); h != nil {
		return &pb.InstanceStatus{Health: h, PostgresAddr: s.cfg.PostgresAddr}, nil
	}
	return s.instanceStatus(ctx)
}

func (s *Server) instanceStatus(ctx context.Context) (*pb.InstanceStatus, error) {
	h, ps, err := s.observeStatus(ctx)
	out := &pb.InstanceStatus{Health: h, PostgresAddr: s.cfg.PostgresAddr}
	if err != nil || h.Error != "" {
		return out, nil
	}
	out.SynchronousStandbyNames = ps.SynchronousStandbyNames
	for _, r := range ps.Replicas {
		out.Replicas = append(out.Replicas, &pb.ReplicaStatus{
			ApplicationName: r.ApplicationName,
			State:           r.State,
			SentLsn:         r.SentLSN.String(),
			ReplayLsn:       r.ReplayLSN.String(),
			SyncState:       r.SyncState,
		})
	}
	return out, nil
}

// operate runs one operation and answers with the status after it.
func (s *Server) operate(ctx context.Context, op func(context.Context) error) (*pb.InstanceStatus, error) {
	if err := op(ctx); err != nil {
		return nil, statusError(asPgError(err))
	}
	s.kickHealth()
	return s.instanceStatus(ctx)
}

// exclusive runs op under opMu, so that a deposed primary's self-fence
// (depose.go) is not interleaved with it.
func (s *Server) exclusive(op func(context.Context) error) func(context.Context) error {
	return func(ctx context.Context) error {
		s.opMu.Lock()
		defer s.opMu.Unlock()
		return op(ctx)
	}
}

// asPgError gives an operation's failure a SQLSTATE if it has none.
func asPgError(err error) error {
	var c pgerr.Coded
	if errors.As(err, &c) {
		return err
	}
	return pgerr.New("55000", "%v", err)
}

func endpoint(e *pb.Endpoint) (pgmanager.Endpoint, error) {
	if e == nil || e.Host == "" || e.Port <= 0 || e.Port > 65535 {
		return pgmanager.Endpoint{}, pgerr.New(pgerr.InvalidParameterValue, "a primary endpoint with host and port is required")
	}
	return pgmanager.Endpoint{Host: e.Host, Port: int(e.Port)}, nil
}

// Promote implements the Promote RPC.
func (s *Server) Promote(ctx context.Context, _ *pb.PromoteRequest) (*pb.InstanceStatus, error) {
	return s.operate(ctx, s.exclusive(s.cfg.Manager.Promote))
}

// Fence implements the Fence RPC. The sidecar's gate closes first, then
// pgmanager fences Postgres and terminates every client backend: the
// pooled, pinned and shared connections alike (fence.go). The gate stays
// closed if Postgres could not be fenced: a primary being replaced must
// serve no one.
func (s *Server) Fence(ctx context.Context, _ *pb.FenceRequest) (*pb.InstanceStatus, error) {
	s.fence.set(true)
	return s.operate(ctx, s.cfg.Manager.Fence)
}

// Unfence implements the Unfence RPC: Postgres first, then the gate.
func (s *Server) Unfence(ctx context.Context, _ *pb.UnfenceRequest) (*pb.InstanceStatus, error) {
	return s.operate(ctx, s.exclusive(func(ctx context.Context) error {
		if err := s.cfg.Manager.Unfence(ctx); err != nil {
			return err
		}
		s.fence.set(false)
		return nil
	}))
}

// SetSynchronousStandbys implements the SetSynchronousStandbys RPC.
func (s *Server) SetSynchronousStandbys(ctx context.Context, req *pb.SetSynchronousStandbysRequest) (*pb.InstanceStatus, error) {
	return s.operate(ctx, func(ctx context.Context) error {
		return s.cfg.Manager.SetSynchronousStandbys(ctx, req.Names)
	})
}

// FollowPrimary implements the FollowPrimary RPC.
func (s *Server) FollowPrimary(ctx context.Context, req *pb.FollowPrimaryRequest) (*pb.InstanceStatus, error) {
	primary, err := endpoint(req.Primary)
	if err != nil {
		return nil, statusError(err)
	}
	return s.operate(ctx, s.exclusive(func(ctx context.Context) error { return s.cfg.Manager.FollowPrimary(ctx, primary) }))
}

// Rewind implements the Rewind RPC: the instance, a former primary, is
// rewound onto primary's timeline and rejoins as its replica.
func (s *Server) Rewind(ctx context.Context, req *pb.RewindRequest) (*pb.InstanceStatus, error) {
	primary, err := endpoint(req.Primary)
	if err != nil {
		return nil, statusError(err)
	}
	// The pools' connections die with the restart; drop them now.
	s.pools.closeIdle()
	// A rewound instance is a replica without the fence (pgmanager drops
	// it): its reads may be served again.
	return s.operate(ctx, s.exclusive(func(ctx context.Context) error {
		if err := s.cfg.Manager.Rewind(ctx, primary); err != nil {
			return err
		}
		s.fence.set(false)
		return nil
	}))
}
