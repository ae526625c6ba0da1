package launch

import (
	"context"
	"crypto/tls"
	"io"
	"log/slog"
	"sync"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/workflows"
)

// RouterOnlineDDL starts OnlineDDL migrations for a router's sessions
// (router.OnlineDDL). It dials Temporal at its first use, and again after
// a failed dial, so that a router starts, and serves everything else,
// while Temporal is away.
type RouterOnlineDDL struct {
	// Addr and Namespace locate Temporal's frontend; TLS, when set, is
	// used to reach it.
	Addr, Namespace string
	TLS             *tls.Config
	// Queue is the task queue of the workers that run migrations.
	Queue string

	mu sync.Mutex
	c  client.Client
}

// client returns the Temporal client, dialling it when there is none.
func (r *RouterOnlineDDL) client(ctx context.Context) (client.Client, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c != nil {
		return r.c, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	c, err := client.DialContext(ctx, client.Options{
		HostPort: r.Addr, Namespace: r.Namespace,
		Logger:            tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)),
		ConnectionOptions: client.ConnectionOptions{TLS: r.TLS},
	})
	if err != nil {
		return nil, pgerr.New("08001", "cannot reach Temporal at %s to start the migration: %v", r.Addr, err)
	}
	r.c = c
	return c, nil
}

// StartOnlineDDL starts the migration of sql in database.
func (r *RouterOnlineDDL) StartOnlineDDL(ctx context.Context, database, sql string, wait bool) (string, string, error) {
	id, err := OnlineDDLID(database, sql)
	if err != nil {
		return "", "", err
	}
	c, err := r.client(ctx)
	if err != nil {
		return "", "", err
	}
	queue := r.Queue
	if queue == "" {
		queue = workflows.TaskQueue
	}
	run, err := StartOnlineDDL(ctx, io.Discard, c, id, queue, workflows.OnlineDDLInput{Database: database, SQL: sql}, wait)
	if err != nil {
		return "", "", err
	}
	return id, run.GetRunID(), nil
}

// WaitOnlineDDL waits for the migration's run to end.
func (r *RouterOnlineDDL) WaitOnlineDDL(ctx context.Context, id, runID string) error {
	c, err := r.client(ctx)
	if err != nil {
		return err
	}
	return WorkflowError(id, c.GetWorkflow(ctx, id, runID).Get(ctx, nil))
}

// Close closes the Temporal client, if one was dialled.
func (r *RouterOnlineDDL) Close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.c != nil {
		r.c.Close()
		r.c = nil
	}
}
