package admin

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tesseradb/tessera/topo/store"
)

const secret = "admin-test-secret-0123456789"

// recorder is a Starter that records what it is asked to start.
type recorder struct {
	mu      sync.Mutex
	started []Action
	changed chan struct{}
}

func newRecorder() *recorder { return &recorder{changed: make(chan struct{}, 1)} }

func (r *recorder) add(a Action) error {
	r.mu.Lock()
	r.started = append(r.started, a)
	r.mu.Unlock()
	select {
	case r.changed <- struct{}{}:
	default:
	}
	return nil
}

func (r *recorder) Failover(_ context.Context, shard, reason string) error {
	return r.add(Action{Kind: ActFailover, Shard: shard, Reason: reason})
}

func (r *recorder) Rejoin(_ context.Context, shard, instance string) error {
	return r.add(Action{Kind: ActRejoin, Shard: shard, Instance: instance})
}

func (r *recorder) Repair(_ context.Context, shard string) error {
	return r.add(Action{Kind: ActRepair, Shard: shard})
}

func (r *recorder) Busy(context.Context, string) ([]string, error) { return nil, nil }

func (r *recorder) actions() []Action {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Action(nil), r.started...)
}

// await waits until an action matching ok was started, and returns it.
func (r *recorder) await(t *testing.T, within time.Duration, what string, ok func(Action) bool) Action {
	t.Helper()
	deadline := time.After(within)
	for {
		for _, a := range r.actions() {
			if ok(a) {
				return a
			}
		}
		select {
		case <-r.changed:
		case <-deadline:
			t.Fatalf("no %s within %s; started: %+v", what, within, r.actions())
		}
	}
}

// runAdmin runs an admin until the test ends, or until the returned
// stop is called.
func runAdmin(t *testing.T, cfg Config) (*Admin, func()) {
	t.Helper()
	a, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("admin %s: %v", cfg.ID, err)
				}
			case <-time.After(10 * time.Second):
				t.Errorf("admin %s did not stop", cfg.ID)
			}
		})
	}
	t.Cleanup(stop)
	return a, stop
}

func dialStore(t *testing.T, endpoints []string) *store.Store {
	t.Helper()
	s, err := store.Dial(context.Background(), endpoints, "test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// waitFor polls cond every 10ms until it holds or within passes.
func waitFor(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %s", what, within)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func leaders(admins ...*Admin) string {
	var out []string
	for _, a := range admins {
		if a.Leader() {
			out = append(out, a.cfg.ID)
		}
	}
	return fmt.Sprint(strings.Join(out, ","))
}
