package router_test

import (
	"context"
	"fmt"
	"math/rand/v2"
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
// terminated and their Postgres killed (restarted in place by pgmanager)
// at random moments, so that transactions and commits break at every
// step: between statements, at PREPARE, at the commit point and at
// COMMIT PREPARED. Afterwards, and after one recovery pass: the balances'
// sum is unchanged, every acknowledged transfer has both ledger rows, no
// transfer has one without the other, and nothing is left prepared.
func TestAtomicTransfersUnderFaults(t *testing.T) {
	if testing.Short() {
		t.Skip("kills Postgres")
	}
	const (
		clients   = 4
		ledger    = 880000 // ledger rows: order_id ledger + transfer number
		accounts  = 890000 // client c's accounts: order_id accounts + c, customers 42 and 1
		runFor    = 8 * time.Second
		startCash = 1000
	)
	ctx := context.Background()
	setup := connect(t, "store")
	mustExec(t, setup,
		"CREATE TABLE IF NOT EXISTS orders (order_id bigint, customer_id bigint, total numeric, PRIMARY KEY (customer_id, order_id))",
		fmt.Sprintf("DELETE FROM orders WHERE order_id >= %d AND order_id < %d", ledger, accounts+clients))
	for c := range clients {
		mustExec(t, setup, fmt.Sprintf("INSERT INTO orders (order_id, customer_id, total) VALUES (%d, 42, %d), (%d, 1, %d)",
			accounts+c, startCash, accounts+c, startCash))
	}

	var mu sync.Mutex
	acked := map[int]bool{} // transfer number → acknowledged
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for c := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var conn *pgx.Conn
			for n := c; ; n += clients {
				select {
				case <-stop:
					if conn != nil {
						conn.Close(ctx)
					}
					return
				default:
				}
				if conn == nil {
					var err error
					if conn, err = pgx.Connect(ctx, dsn("store")); err != nil {
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
				err := conn.SendBatch(ctx, batch).Close()
				mu.Lock()
				acked[n] = err == nil
				mu.Unlock()
				if err != nil {
					conn.Close(ctx)
					conn = nil
				}
			}
		}()
	}

	// Faults: terminate every client backend of a shard, or kill its
	// Postgres, at random moments.
	primary := func(shard string) (string, string) {
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
	faults := map[string]int{}
	deadline := time.Now().Add(runFor)
	for time.Now().Before(deadline) {
		time.Sleep(time.Duration(800+rand.IntN(800)) * time.Millisecond)
		shard := []string{"customer-shard-1", "customer-shard-2"}[rand.IntN(2)]
		id, addr := primary(shard)
		if rand.IntN(3) == 0 {
			if err := cluster.KillPostgres(id); err == nil {
				faults["kill postgres "+shard]++
			}
			continue
		}
		if c, err := pgx.Connect(ctx, addr); err == nil {
			c.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = 'store' AND backend_type = 'client backend' AND pid <> pg_backend_pid()")
			c.Close(ctx)
			faults["terminate backends "+shard]++
		}
	}
	close(stop)
	wg.Wait()
	t.Logf("faults: %v", faults)

	// The shards are back; a recovery pass finishes what the faults left.
	for _, shard := range []string{"customer-shard-1", "customer-shard-2"} {
		_, addr := primary(shard)
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
			"SELECT order_id - $1, total::int FROM orders WHERE order_id >= $1 AND order_id < $2 AND customer_id = $3", ledger, accounts, customer)
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
	for n, ok := range acked {
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
	var sum int
	if err := setup.QueryRow(ctx, fmt.Sprintf("SELECT coalesce(sum(total), 0)::int FROM orders WHERE order_id >= %d AND order_id < %d", accounts, accounts+clients)).Scan(&sum); err != nil {
		// The router's connection may have been terminated: read the
		// shards directly.
		sum = 0
		for _, s := range []struct {
			shard    string
			customer int
		}{{"customer-shard-1", 42}, {"customer-shard-2", 1}} {
			var part int
			if err := direct(t, s.shard, "store").QueryRow(ctx, "SELECT coalesce(sum(total), 0)::int FROM orders WHERE order_id >= $1 AND order_id < $2 AND customer_id = $3",
				accounts, accounts+clients, s.customer).Scan(&part); err != nil {
				t.Fatal(err)
			}
			sum += part
		}
	}
	if sum != 2*clients*startCash {
		t.Errorf("the balances sum to %d, want %d", sum, 2*clients*startCash)
	}
	t.Logf("%d transfers tried, %d acknowledged, %d committed", len(acked), ackedN, committed)
	if ackedN == 0 {
		t.Error("no transfer was acknowledged: the test proved nothing")
	}
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
