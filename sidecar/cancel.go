package sidecar

import (
	"context"
	"encoding/binary"
	"net"
	"strconv"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// cancels maps sessions' cancel tokens to the backend each is running a
// batch on, so that Cancel can reach it.
type cancels struct {
	mu      sync.Mutex
	running map[string]cancelTarget
}

// cancelTarget is where a session's batch runs: a backend of its own, or
// its turn on a shared one (pipeline.go).
type cancelTarget struct {
	b *backend
	t *turn
}

func (cs *cancels) start(token string, b *backend, t *turn) {
	if token == "" {
		return
	}
	cs.mu.Lock()
	if cs.running == nil {
		cs.running = map[string]cancelTarget{}
	}
	cs.running[token] = cancelTarget{b, t}
	cs.mu.Unlock()
}

func (cs *cancels) stop(token string) {
	if token == "" {
		return
	}
	cs.mu.Lock()
	delete(cs.running, token)
	cs.mu.Unlock()
}

func (cs *cancels) target(token string) cancelTarget {
	cs.mu.Lock()
	defer cs.mu.Unlock()
	return cs.running[token]
}

// Cancel implements the Cancel RPC: it sends Postgres a CancelRequest for
// the backend the session is running a batch on. A batch queued on a
// shared connection behind other sessions' is canceled once it runs:
// until then the request would cancel someone else's.
func (s *Server) Cancel(ctx context.Context, req *pb.CancelRequest) (*pb.CancelResponse, error) {
	target := s.cancels.target(req.CancelToken)
	if target.b == nil || req.CancelToken == "" {
		return &pb.CancelResponse{}, nil
	}
	b := target.b
	if target.t != nil {
		if !b.pipe.cancel(target.t) {
			return &pb.CancelResponse{Canceled: true}, nil
		}
		defer b.pipe.cancelDone()
	} else {
		// Only while the session's batch still runs there: once it has
		// ended, the connection may serve someone else.
		b.cancelMu.Lock()
		defer b.cancelMu.Unlock()
		if b.cancelFor != req.CancelToken {
			return &pb.CancelResponse{}, nil
		}
		b.pipe.cancelBegin()
		defer b.pipe.cancelDone()
	}
	if err := s.signalCancel(ctx, b); err != nil {
		return nil, statusError(err)
	}
	return &pb.CancelResponse{Canceled: true}, nil
}

// signalCancel sends Postgres a CancelRequest for b's backend process.
func (s *Server) signalCancel(ctx context.Context, b *backend) error {
	cfg, err := pgconn.ParseConfig(s.cfg.Manager.ConnConfig("postgres", "postgres"))
	if err != nil {
		return err
	}
	addr, network := net.JoinHostPort(cfg.Host, strconv.Itoa(int(cfg.Port))), "tcp"
	if len(cfg.Host) > 0 && cfg.Host[0] == '/' {
		addr, network = cfg.Host+"/.s.PGSQL."+strconv.Itoa(int(cfg.Port)), "unix"
	}
	d := net.Dialer{Timeout: 5 * time.Second}
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	msg := make([]byte, 0, 16+len(b.secret))
	msg = binary.BigEndian.AppendUint32(msg, uint32(12+len(b.secret)))
	msg = binary.BigEndian.AppendUint32(msg, 80877102)
	msg = binary.BigEndian.AppendUint32(msg, b.pid)
	msg = append(msg, b.secret...)
	if _, err := conn.Write(msg); err != nil {
		return err
	}
	// Postgres closes the connection once it has taken the request.
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	conn.Read(make([]byte, 1))
	return nil
}
