// Package healthwatch follows one sidecar's Health stream for a client:
// the router (which instances may take statements) and the admin (which
// primaries are down). Both need the same three things of it, which a
// bare stream does not give:
//
//   - staleness: a sidecar sends at least one status every heartbeat, so
//     a stream silent for longer than StaleAfter belongs to a hung
//     process or a lost network, and is ended and counted as lost rather
//     than trusted forever;
//   - a fresh connection for every attempt: a gRPC connection that failed
//     backs off for up to two minutes before trying again, far too long
//     to notice a sidecar (or a restarted replica) coming back;
//   - a short, bounded retry: 50 ms doubling to 1 s, back to 50 ms after
//     a stream that delivered anything.
//
// It imports the sidecar's client only; router and admin import it.
package healthwatch

import (
	"context"
	"time"

	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// DefaultStaleAfter is StaleAfter's default: a few heartbeats of a
// sidecar at its default interval (1 s).
const DefaultStaleAfter = 5 * time.Second

// Retry bounds between attempts.
const (
	minRetry = 50 * time.Millisecond
	maxRetry = time.Second
)

// Config says which sidecar to follow and how.
type Config struct {
	Addr string
	Dial sidecar.DialOptions
	// StaleAfter ends a stream silent this long; 0 means DefaultStaleAfter.
	StaleAfter time.Duration
}

// Watcher is told what the stream says. Both are called from Follow's
// goroutine, one at a time.
type Watcher interface {
	// Status delivers one status; c is the connection it came on, open
	// until Lost is called, for calls such as Status.
	Status(h *pb.HealthStatus, c *sidecar.Client)
	// Lost says the stream broke, went stale or could not be opened:
	// the instance is unreachable until the next Status.
	Lost(err error)
}

// Follow follows the sidecar until ctx ends.
func Follow(ctx context.Context, cfg Config, w Watcher) {
	if cfg.StaleAfter <= 0 {
		cfg.StaleAfter = DefaultStaleAfter
	}
	delay := minRetry
	for ctx.Err() == nil {
		delivered, err := stream(ctx, cfg, w)
		if delivered {
			delay = minRetry
		}
		if ctx.Err() != nil {
			return
		}
		w.Lost(err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, maxRetry)
	}
}

// errStale says the stream went quiet for longer than StaleAfter.
type errStale time.Duration

func (e errStale) Error() string {
	return "the health stream was silent for " + time.Duration(e).String()
}

// stream follows one Health stream until it breaks, goes stale or ctx
// ends, and reports whether it delivered anything.
func stream(ctx context.Context, cfg Config, w Watcher) (delivered bool, err error) {
	c, err := sidecar.Dial(cfg.Addr, cfg.Dial)
	if err != nil {
		return false, err
	}
	defer c.Close()
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	stale := time.AfterFunc(cfg.StaleAfter, cancel)
	defer stale.Stop()
	hs, err := c.Health(sctx, &pb.HealthRequest{})
	if err != nil {
		return false, err
	}
	for {
		h, err := hs.Recv()
		if err != nil {
			if sctx.Err() != nil && ctx.Err() == nil {
				err = errStale(cfg.StaleAfter)
			}
			return delivered, err
		}
		stale.Reset(cfg.StaleAfter)
		delivered = true
		w.Status(h, c)
	}
}
