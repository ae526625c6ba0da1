package router_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/router"
)

// TestAtomicTransfersUnderProcessKills: the transfers of
// TestAtomicTransfersUnderFaults (half the clients in the extended
// protocol, half in the simple one) go through a router in a process of
// its own that kills itself (SIGKILL) at a step of an atomic commit,
// every step in turn (router.CommitSteps: participants prepared, decision
// recorded, commit point answered, outcome decided, prepared parts
// finished), and is started again, after which a recovery pass runs (the
// schedule's, sooner). Meanwhile, in turn: a participant's sidecar is
// killed and restarted, a participant's Postgres is killed, its client
// backends are terminated, and a recovery pass is stopped partway (its
// worker's death: the activity's context ends at a random moment), and
// a whole recovery pass runs (as the schedule's would). It
// runs until every step has killed a router at least once (at least 10 s,
// or TESSERA_ATOMIC_FAULT_TIME, and at most 80 s more); then the
// invariants of stopAndCheck.
func TestAtomicTransfersUnderProcessKills(t *testing.T) {
	if testing.Short() {
		t.Skip("kills routers, sidecars and Postgres")
	}
	runFor := faultTestTime(10 * time.Second)
	var addr atomic.Pointer[string]
	first, err := startRouterProcess(t, "", 0)
	if err != nil {
		t.Fatal(err)
	}
	addr.Store(&first.addr)
	w := startTransfers(t, 860000, 870000, func() string {
		return fmt.Sprintf("postgres://postgres:postgres@%s/store?sslmode=disable", *addr.Load())
	})

	// Routers: each one kills itself at its step; the next takes its
	// place, and recovery finishes what it left.
	var mu sync.Mutex
	kills := map[string]int{}
	stopRouters := make(chan struct{})
	routersDone := make(chan error, 1)
	first.kill()
	go func() {
		routersDone <- func() error {
			for i := 0; ; i++ {
				step := router.CommitSteps[i%len(router.CommitSteps)]
				p, err := startRouterProcess(t, step, 1+rand.IntN(5))
				if err != nil {
					return err
				}
				addr.Store(&p.addr)
				select {
				case <-p.exited:
				case <-stopRouters:
					p.kill()
					return nil
				}
				if !p.killedItself() {
					return fmt.Errorf("the router process killed at %s ended otherwise: %v", step, p.cmd.ProcessState)
				}
				mu.Lock()
				kills[step]++
				mu.Unlock()
				if _, err := tryResolvePrepared(activities.ResolvePreparedInput{}); err != nil {
					t.Logf("recovery after a router's death: %v", err)
				}
			}
		}()
	}()
	allSteps := func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, s := range router.CommitSteps {
			if kills[s] == 0 {
				return false
			}
		}
		return true
	}

	faults := map[string]int{}
	ctx := context.Background()
	start := time.Now()
	for i := 0; time.Since(start) < runFor || (!allSteps() && time.Since(start) < runFor+80*time.Second); i++ {
		time.Sleep(time.Duration(800+rand.IntN(800)) * time.Millisecond)
		shard := []string{"customer-shard-1", "customer-shard-2"}[rand.IntN(2)]
		switch i % 5 {
		case 0:
			id, _ := primaryOf(t, shard)
			if err := cluster.KillSidecar(id); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
			if err := cluster.RestartSidecar(ctx, id); err != nil {
				t.Fatal(err)
			}
			faults["kill sidecar "+shard]++
		case 1:
			faults[killPostgres(t, shard)]++
		case 2:
			faults[terminateBackends(t, shard)]++
		case 3:
			if err := interruptedRecovery(time.Duration(rand.IntN(400)) * time.Millisecond); err != nil {
				faults["recovery pass stopped partway"]++
			} else {
				faults["recovery pass not stopped in time"]++
			}
		case 4:
			// The schedule's pass: prepared parts a dead router or a
			// stopped pass left hold their rows' locks until one runs.
			if _, err := tryResolvePrepared(activities.ResolvePreparedInput{}); err != nil {
				faults["recovery pass failed"]++
			} else {
				faults["recovery pass"]++
			}
		}
	}
	close(stopRouters)
	if err := <-routersDone; err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	t.Logf("router kills by step: %v; other faults: %v; %.0f s", kills, faults, time.Since(start).Seconds())
	mu.Unlock()
	if !allSteps() {
		t.Errorf("not every commit step killed a router: %v", kills)
	}
	w.stopAndCheck(t)
}

// interruptedRecovery runs one recovery pass (the real activity, in
// Temporal's test environment) whose context ends after d, as its
// worker's death would end it, and returns its error.
func interruptedRecovery(d time.Duration) error {
	acts, err := activities.New(activities.Config{Store: cluster.Store(), Secret: cluster.Secret()})
	if err != nil {
		return err
	}
	defer acts.Close()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{BackgroundActivityContext: ctx})
	env.RegisterActivity(acts.ResolvePrepared)
	_, err = env.ExecuteActivity(acts.ResolvePrepared, activities.ResolvePreparedInput{})
	if err == nil && ctx.Err() == nil {
		return nil
	}
	return errors.Join(err, ctx.Err())
}
