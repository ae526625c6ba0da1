package sidecar_test

import (
	"context"
	"net"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tesseradb/tessera/pgwire"
	"github.com/tesseradb/tessera/sidecar"
)

// slowAfterWrite holds its first writes (the startup's) back after
// sending them, longer than pgconn's 15 ms slow-write threshold: pgconn
// starts its background reader, which reads the server's answer
// meanwhile and goes on to wait for more, as a loaded machine makes it
// do. Later writes go at once.
type slowAfterWrite struct {
	net.Conn
	slow *atomic.Int32
}

func (c slowAfterWrite) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if c.slow.Add(-1) >= 0 {
		time.Sleep(40 * time.Millisecond)
	}
	return n, err
}

// TestBackendTakenOverAfterASlowStartup: a backend connection whose
// startup writes were slow answers its first statement. Without
// SyncConn before Hijack, pgconn's background reader, still waiting in a
// Read of the socket, took that answer and the session waited forever
// (the router package's CI run hung on it).
func TestBackendTakenOverAfterASlowStartup(t *testing.T) {
	cfg, err := pgconn.ParseConfig(shared.ConnConfig("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		slow := &atomic.Int32{}
		slow.Store(3) // the startup message and the SCRAM exchange
		return slowAfterWrite{c, slow}, nil
	}
	for i := range 3 {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		got, err := sidecar.AskNewBackend(ctx, cfg, "SELECT 42", 5*time.Second)
		cancel()
		if err != nil {
			t.Fatalf("connection %d: the first statement after a slow startup: %v (its answer went to pgconn's background reader)", i, err)
		}
		var value string
		pgwire.Messages(got, func(typ byte, msg []byte) error {
			if row := pgwire.DataRowValues(msg); typ == 'D' && len(row) == 1 {
				value = string(row[0])
			}
			return nil
		})
		if value != "42" {
			t.Fatalf("connection %d answered %q, want 42", i, value)
		}
	}
}
