package router_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/activities"
)

// TestAtomicTransfersUnderFaults: clients transfer money between an
// account on customer-shard-1 (the commit point: written first) and one
// on customer-shard-2, each transfer one transaction that also writes a
// ledger row on both shards, while the shards' client backends are
// terminated, their sidecars killed (and started again) and their
// Postgres killed (restarted in place by pgmanager) at random moments, so
// that transactions and commits break at every step: between statements, at PREPARE, at the commit point and at
// COMMIT PREPARED. Afterwards, and after one recovery pass: the balances'
// sum is unchanged, every acknowledged transfer has both ledger rows, no
// transfer has one without the other, and nothing is left prepared.
func TestAtomicTransfersUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("kills Postgres")
	}
	w := startTransfers(t, 880000, 890000, func() string { return dsn("store") })
	faults := map[string]int{}
	deadline := time.Now().Add(faultTestTime(8 * time.Second))
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(800+rand.IntN(800)) * time.Millisecond)
		shard := []string{"customer-shard-1", "customer-shard-2"}[rand.IntN(2)]
		switch rand.IntN(4) {
		case 0:
			faults[killPostgres(t, shard)]++
		case 1:
			faults[killSidecar(t, shard)]++
		default:
			faults[terminateBackends(t, shard)]++
		}
	}
	t.Logf("faults: %v", faults)
	w.stopAndCheck(t)
}

// transfers is the fault tests' workload: transferClients clients, each
// moving money between its account on customer-shard-1 (customer 42) and
// its account on customer-shard-2 (customer 1) in transactions that also
// write a ledger row on both shards (order_id ledger + transfer number),
// reconnecting after any error to wherever dsn says the router is.
type transfers struct {
	ledger, accounts int // order_id ranges: ledger rows from ledger up to accounts; accounts + client
	mu               sync.Mutex
	acked            map[int]bool // transfer number → acknowledged
	timeouts         int          // transfers given up after 15 s
	stop             chan struct{}
	wg               sync.WaitGroup
}

const (
	transferClients = 4
	startCash       = 1000
)

func startTransfers(t *testing.T, ledger, accounts int, dsn func() string) *transfers {
	t.Helper()
	ctx := context.Background()
	setup := connect(t, "store")
	mustExec(t, setup,
		"CREATE TABLE IF NOT EXISTS orders (order_id bigint, customer_id bigint, total numeric, PRIMARY KEY (customer_id, order_id))",
		fmt.Sprintf("DELETE FROM orders WHERE order_id >= %d AND order_id < %d", ledger, accounts),
		fmt.Sprintf("DELETE FROM orders WHERE order_id >= %d AND order_id < %d", accounts, accounts+transferClients))
	for c := range transferClients {
		mustExec(t, setup, fmt.Sprintf("INSERT INTO orders (order_id, customer_id, total) VALUES (%d, 42, %d), (%d, 1, %d)",
			accounts+c, startCash, accounts+c, startCash))
	}
	w := &transfers{ledger: ledger, accounts: accounts, acked: map[int]bool{}, stop: make(chan struct{})}
	for c := range transferClients {
		w.wg.Add(1)
		go func() {
			defer w.wg.Done()
			var conn *pgx.Conn
			for n := c; ; n += transferClients {
				select {
				case <-w.stop:
					if conn != nil {
						conn.Close(ctx)
					}
					return
				default:
				}
				if conn == nil {
					var err error
					if conn, err = pgx.Connect(ctx, dsn()); err != nil {
						time.Sleep(50 * time.Millisecond)
						continue
					}
					mustExecQuietly(conn, "SET lock_timeout = '5s'")
				}
				amount := 1 + rand.IntN(9)
				if rand.IntN(2) == 0 {
					amount = -amount
				}
				batch := &pgx.Batch{}
				batch.Queue("BEGIN")
				batch.Queue(fmt.Sprintf("UPDATE orders SET total = total - %d WHERE order_id = %d AND customer_id = 42", amount, accounts+c))
				batch.Queue(fmt.Sprintf("UPDATE orders SET total = total + %d WHERE order_id = %d AND customer_id = 1", amount, accounts+c))
				batch.Queue(fmt.Sprintf("INSERT INTO orders (order_id, customer_id, total) VALUES (%d, 42, %d)", ledger+n, -amount))
				batch.Queue(fmt.Sprintf("INSERT INTO orders (order_id, customer_id, total) VALUES (%d, 1, %d)", ledger+n, amount))
				batch.Queue("COMMIT")
				var err error
				// A transfer that hangs (its router stuck behind a dead
				// peer) is given up, as a client's timeout would.
				tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
				if c%2 == 0 {
					// The extended protocol: pgx's batch.
					err = conn.SendBatch(tctx, batch).Close()
				} else {
					// The simple protocol, a statement at a time.
					for _, q := range batch.QueuedQueries {
						if _, err = conn.Exec(tctx, q.SQL, pgx.QueryExecModeSimpleProtocol); err != nil {
							break
						}
					}
				}
				if errors.Is(tctx.Err(), context.DeadlineExceeded) {
					w.mu.Lock()
					w.timeouts++
					w.mu.Unlock()
				}
				cancel()
				w.mu.Lock()
				w.acked[n] = err == nil
				w.mu.Unlock()
				if err != nil {
					conn.Close(ctx)
					conn = nil
				}
			}
		}()
	}
	return w
}

// primaryOf returns a shard's primary: its instance id and a direct DSN.
func primaryOf(t *testing.T, shard string) (string, string) {
	t.Helper()
	for _, s := range cluster.Info().Shards {
		for _, in := range s.Instances {
			if s.UID == shard && in.Role == "primary" {
				return in.ID, fmt.Sprintf("postgres://postgres:postgres@127.0.0.1:%d/postgres?sslmode=disable", in.Port)
			}
		}
	}
	t.Fatalf("no primary for %s", shard)
	return "", ""
}

// killPostgres kills a shard's primary's postmaster (pgmanager restarts
// it in place) and names the fault.
func killPostgres(t *testing.T, shard string) string {
	id, _ := primaryOf(t, shard)
	if err := cluster.KillPostgres(id); err != nil {
		return "kill postgres failed"
	}
	return "kill postgres " + shard
}

// killSidecar stops a shard primary's sidecar at once (its sessions and
// backends end, prepared transactions stay) and starts it again after a
// moment, as a supervisor restarts a dead process.
func killSidecar(t *testing.T, shard string) string {
	id, _ := primaryOf(t, shard)
	if err := cluster.KillSidecar(id); err != nil {
		return "kill sidecar failed"
	}
	time.Sleep(time.Duration(100+rand.IntN(400)) * time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := cluster.RestartSidecar(ctx, id); err != nil {
		t.Fatalf("restarting the sidecar of %s: %v", id, err)
	}
	return "kill sidecar " + shard
}

// terminateBackends ends every client backend of a shard's primary.
func terminateBackends(t *testing.T, shard string) string {
	_, addr := primaryOf(t, shard)
	ctx := context.Background()
	c, err := pgx.Connect(ctx, addr)
	if err != nil {
		return "terminate backends failed"
	}
	defer c.Close(ctx)
	c.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'store' AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
	return "terminate backends " + shard
}

// stopAndCheck stops the clients, lets recovery finish what the faults
// left, and checks the invariants: nothing prepared, no transfer half
// committed, every acknowledged one present, the balances' sum unchanged.
func (w *transfers) stopAndCheck(t *testing.T) {
	t.Helper()
	ctx := context.Background()
	close(w.stop)
	w.wg.Wait()
	for _, shard := range []string{"customer-shard-1", "customer-shard-2"} {
		_, addr := primaryOf(t, shard)
		waitFor(t, 60*time.Second, func() error {
			c, err := pgx.Connect(ctx, addr)
			if err == nil {
				c.Close(ctx)
			}
			return err
		})
	}
	waitFor(t, 60*time.Second, func() error {
		res, err := tryResolvePrepared(activities.ResolvePreparedInput{})
		if err == nil && len(res.Unreached) > 0 {
			err = fmt.Errorf("unreached %v", res.Unreached)
		}
		if err == nil {
			t.Logf("recovery: %d committed, %d rolled back", len(res.Committed), len(res.RolledBack))
		}
		return err
	})
	noPrepared(t)

	// The ledger rows of each shard, by transfer number.
	rowsOf := func(shard string, customer int) map[int]int {
		rows, err := direct(t, shard, "store").Query(ctx,
			"SELECT order_id - $1, total::int FROM orders WHERE order_id >= $1 AND order_id < $2 AND customer_id = $3", w.ledger, w.accounts, customer)
		if err != nil {
			t.Fatal(err)
		}
		out := map[int]int{}
		for rows.Next() {
			var n, v int
			if err := rows.Scan(&n, &v); err != nil {
				t.Fatal(err)
			}
			out[n] = v
		}
		return out
	}
	left, right := rowsOf("customer-shard-1", 42), rowsOf("customer-shard-2", 1)
	committed, ackedN := 0, 0
	for n, ok := range w.acked {
		_, inLeft := left[n]
		_, inRight := right[n]
		if inLeft != inRight {
			t.Errorf("transfer %d (acknowledged: %v) is half committed (customer-shard-1: %v, customer-shard-2: %v)", n, ok, inLeft, inRight)
		}
		if ok {
			ackedN++
			if !inLeft || !inRight {
				t.Errorf("acknowledged transfer %d is missing", n)
			}
		}
		if inLeft && inRight {
			committed++
		}
	}
	sum := 0
	for _, s := range []struct {
		shard    string
		customer int
	}{{"customer-shard-1", 42}, {"customer-shard-2", 1}} {
		var part int
		if err := direct(t, s.shard, "store").QueryRow(ctx, "SELECT coalesce(sum(total), 0)::int FROM orders WHERE order_id >= $1 AND order_id < $2 AND customer_id = $3",
			w.accounts, w.accounts+transferClients, s.customer).Scan(&part); err != nil {
			t.Fatal(err)
		}
		sum += part
	}
	if sum != 2*transferClients*startCash {
		t.Errorf("the balances sum to %d, want %d", sum, 2*transferClients*startCash)
	}
	t.Logf("%d transfers tried, %d acknowledged, %d committed, %d given up after 15 s", len(w.acked), ackedN, committed, w.timeouts)
	if ackedN == 0 {
		t.Error("no transfer was acknowledged: the test proved nothing")
	}
}

// faultTestTime is how long a fault test runs: def, or longer on demand
// (TESSERA_ATOMIC_FAULT_TIME=5m, for thousands of transfers).
func faultTestTime(def time.Duration) time.Duration {
	if d, err := time.ParseDuration(os.Getenv("TESSERA_ATOMIC_FAULT_TIME")); err == nil && d > def {
		return d
	}
	return def
}

func mustExecQuietly(conn *pgx.Conn, sql string) { conn.Exec(context.Background(), sql) }

// tryResolvePrepared is resolvePrepared returning its failure.
func tryResolvePrepared(in activities.ResolvePreparedInput) (res activities.ResolvePreparedResult, err error) {
	acts, err := activities.New(activities.Config{Store: cluster.Store(), Secret: cluster.Secret()})
	if err != nil {
		return res, err
	}
	defer acts.Close()
	env := resolveEnv(acts)
	env.ExecuteWorkflow("ResolvePrepared", in)
	if err := env.GetWorkflowError(); err != nil {
		return res, err
	}
	err = env.GetWorkflowResult(&res)
	return res, err
}

// waitFor retries f until it succeeds or the time is up.
func waitFor(t *testing.T, limit time.Duration, f func() error) {
	t.Helper()
	end := time.Now().Add(limit)
	for {
		err := f()
		if err == nil {
			return
		}
		if time.Now().After(end) {
			t.Fatal(err)
		}
		time.Sleep(500 * time.Millisecond)
	}
}
