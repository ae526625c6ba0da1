package router_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/twophase"
	"github.com/tesseradb/tessera/workflows"
)

// Recovery of atomic commits whose router died. A router's death is
// played by hand on the shards' primaries, step by step as the router
// commits (atomic.go): the participant (customer-shard-2) prepared and
// the coordinator vanished before its commit point (customer-shard-1)
// recorded a decision, or after its commit point committed. The
// ResolvePrepared workflow (Temporal's test environment, the real
// activity against the real shards) must roll back the first and commit
// the second, and a coordinator that comes back after recovery decided
// abort must fail to commit.

// resolvePrepared runs one recovery pass that takes over every prepared
// transaction, however young.
func resolvePrepared(t *testing.T, in activities.ResolvePreparedInput) activities.ResolvePreparedResult {
	t.Helper()
	acts, err := activities.New(activities.Config{Store: cluster.Store(), Secret: cluster.Secret()})
	if err != nil {
		t.Fatal(err)
	}
	defer acts.Close()
	env := resolveEnv(acts)
	env.ExecuteWorkflow(workflows.ResolvePreparedName, in)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var res activities.ResolvePreparedResult
	if err := env.GetWorkflowResult(&res); err != nil {
		t.Fatal(err)
	}
	return res
}

// prepareOn2 prepares, on customer-shard-2, a transaction setting
// customer 1's balance, under gid.
func prepareOn2(t *testing.T, gid string, balance int) {
	t.Helper()
	conn := direct(t, "customer-shard-2", "store")
	for _, sql := range []string{
		"BEGIN",
		fmt.Sprintf("UPDATE orders SET total = %d WHERE order_id = %d AND customer_id = 1", balance, atomicOrder),
		"PREPARE TRANSACTION '" + gid + "'",
	} {
		if _, err := conn.Exec(context.Background(), sql); err != nil {
			t.Fatalf("%s: %v", sql, err)
		}
	}
}

func TestRecoveryResolvesWhatADeadRouterLeft(t *testing.T) {
	conn := connect(t, "store")
	atomicSetup(t, conn)
	// A commit through the router creates the decisions table.
	mustExec(t, conn, "BEGIN",
		fmt.Sprintf("UPDATE orders SET total = 100 WHERE order_id = %d AND customer_id = 42", atomicOrder),
		fmt.Sprintf("UPDATE orders SET total = 100 WHERE order_id = %d AND customer_id = 1", atomicOrder),
		"COMMIT")
	ctx := context.Background()
	gen := twophase.NewGenerator()

	// 1. Died after PREPARE, before the decision: presumed abort.
	aborted := gen.Next("customer-shard-1")
	prepareOn2(t, aborted, 7)
	// 2. Died after its commit point committed (write and decision).
	committed := gen.Next("customer-shard-1")
	cp := direct(t, "customer-shard-1", "store")
	mustExec(t, cp, "BEGIN",
		fmt.Sprintf("UPDATE orders SET total = 90 WHERE order_id = %d AND customer_id = 42", atomicOrder))
	// The participant can only prepare once the first one is finished:
	// both update the same row. So 2 runs after 1 is resolved.
	res := resolvePrepared(t, activities.ResolvePreparedInput{})
	if !slices.Contains(res.RolledBack, aborted) || len(res.Committed) != 0 {
		t.Fatalf("recovery of a transaction with no decision: %+v, want %s rolled back", res, aborted)
	}
	if b := balanceOn(t, "customer-shard-2", 1); b != "100" {
		t.Fatalf("customer 1 has %s after the rollback, want 100", b)
	}
	// The coordinator comes back and tries to commit: the decision is
	// taken.
	if _, err := cp.Exec(ctx, twophase.RecordCommit(cluster.Secret(), aborted)); sqlstate(err) != "23505" {
		t.Fatalf("a late coordinator's decision: %v, want 23505", err)
	}
	mustExec(t, cp, "ROLLBACK", "BEGIN",
		fmt.Sprintf("UPDATE orders SET total = 90 WHERE order_id = %d AND customer_id = 42", atomicOrder))

	prepareOn2(t, committed, 110)
	mustExec(t, cp, twophase.RecordCommit(cluster.Secret(), committed), "COMMIT")
	res = resolvePrepared(t, activities.ResolvePreparedInput{})
	if !slices.Contains(res.Committed, committed) || len(res.RolledBack) != 0 {
		t.Fatalf("recovery of a transaction whose commit point committed: %+v, want %s committed", res, committed)
	}
	if x, y := balanceOn(t, "customer-shard-1", 42), balanceOn(t, "customer-shard-2", 1); x != "90" || y != "110" {
		t.Fatalf("the shards hold %s and %s after recovery, want 90 and 110", x, y)
	}

	// 3. Recovery runs while the coordinator is inside its commit
	// point's transaction, decision row written: it waits, then follows.
	racing := gen.Next("customer-shard-1")
	prepareOn2(t, racing, 120)
	mustExec(t, cp, "BEGIN",
		fmt.Sprintf("UPDATE orders SET total = 80 WHERE order_id = %d AND customer_id = 42", atomicOrder),
		twophase.RecordCommit(cluster.Secret(), racing))
	committedAt := make(chan error, 1)
	go func() {
		time.Sleep(2 * time.Second)
		_, err := cp.Exec(context.Background(), "COMMIT")
		committedAt <- err
	}()
	res = resolvePrepared(t, activities.ResolvePreparedInput{})
	if err := <-committedAt; err != nil {
		t.Fatalf("the coordinator's COMMIT: %v", err)
	}
	if !slices.Contains(res.Committed, racing) {
		t.Fatalf("recovery racing a committing coordinator: %+v, want %s committed", res, racing)
	}
	if x, y := balanceOn(t, "customer-shard-1", 42), balanceOn(t, "customer-shard-2", 1); x != "80" || y != "120" {
		t.Fatalf("the shards hold %s and %s after recovery, want 80 and 120", x, y)
	}
	noPrepared(t)

	// 4. A client forges a 'commit' decision for a gid whose coordinator
	// never reached its commit point (any role may insert decision rows,
	// and gids are public in pg_prepared_xacts): without the cluster
	// secret's seal it counts as abort, so recovery rolls the participant
	// back rather than committing half a transaction.
	for _, seal := range []string{"", twophase.Seal("not the cluster secret", "")} {
		forged := gen.Next("customer-shard-1")
		if seal != "" {
			seal = twophase.Seal("not the cluster secret", forged)
		}
		prepareOn2(t, forged, 130)
		mustExec(t, cp, "INSERT INTO _tessera.commit_decisions (gid, outcome, seal) VALUES ('"+forged+"', 'commit', NULLIF('"+seal+"', ''))")
		res = resolvePrepared(t, activities.ResolvePreparedInput{})
		if !slices.Contains(res.RolledBack, forged) || len(res.Committed) != 0 {
			t.Fatalf("recovery of a transaction with a forged decision (seal %q): %+v, want %s rolled back", seal, res, forged)
		}
		if y := balanceOn(t, "customer-shard-2", 1); y != "120" {
			t.Fatalf("customer 1 has %s after a forged decision, want 120", y)
		}
	}
	noPrepared(t)

	// Decisions no participant needs go after the retention.
	time.Sleep(10 * time.Millisecond)
	res = resolvePrepared(t, activities.ResolvePreparedInput{Retention: time.Millisecond})
	if res.Deleted < 5 || decisions(t, "customer-shard-1") != 0 {
		t.Fatalf("cleanup: %+v, %d commit decisions left", res, decisions(t, "customer-shard-1"))
	}
}

// resolveEnv is Temporal's test environment with the recovery workflow
// and the real activity registered.
func resolveEnv(acts *activities.Activities) *testsuite.TestWorkflowEnvironment {
	var suite testsuite.WorkflowTestSuite
	env := suite.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(workflows.ResolvePrepared, workflow.RegisterOptions{Name: workflows.ResolvePreparedName})
	env.RegisterActivityWithOptions(acts.ResolvePrepared, activity.RegisterOptions{Name: "ResolvePrepared"})
	env.SetTestTimeout(2 * time.Minute)
	return env
}
