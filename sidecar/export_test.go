package sidecar

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tesseradb/tessera/pgwire"
)

// AskNewBackend opens a backend connection with cfg as the pool does
// (dialBackend) and runs sql on it, waiting at most wait for the answer:
// for the tests of taking a connection over from pgconn.
func AskNewBackend(ctx context.Context, cfg *pgconn.Config, sql string, wait time.Duration) ([]byte, error) {
	b, err := dialBackendConfig(ctx, cfg, time.Minute)
	if err != nil {
		return nil, err
	}
	defer b.close()
	b.conn.SetDeadline(time.Now().Add(wait))
	var got []byte
	last, _, err := b.exchange(pgwire.AppendQuery(nil, sql), 0, nil, false, func(chunk []byte) error {
		got = append(got, chunk...)
		return nil
	})
	return append(got, last.chunk...), err
}

// CutOff reports whether the sidecar's gate is closed because the
// topology service has not answered (isolation.go).
func (s *Server) CutOff() bool {
	s.fence.mu.Lock()
	defer s.fence.mu.Unlock()
	return s.fence.isolated
}
