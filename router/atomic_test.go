package router_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/router"
	"github.com/tesseradb/tessera/topo/store"
)

// Atomic commit across shards (atomic.go). Customer 42 lives on
// customer-shard-1 and customer 1 on customer-shard-2; accounts are rows
// of orders (order_id atomicOrder), their balance its total.

const atomicOrder = 770001

var atomicModes = []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeExec}

// atomicSetup creates the accounts of customers 42 and 1, 100 each.
func atomicSetup(t *testing.T, conn *pgx.Conn) {
	t.Helper()
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS orders (order_id bigint, customer_id bigint, total numeric, PRIMARY KEY (customer_id, order_id))",
		fmt.Sprintf("DELETE FROM orders WHERE order_id = %d", atomicOrder),
		fmt.Sprintf("INSERT INTO orders (order_id, customer_id, total) VALUES (%d, 42, 100), (%d, 1, 100)", atomicOrder, atomicOrder))
}

// balanceOn reads an account's balance on its shard's primary directly.
func balanceOn(t *testing.T, shard string, customer int) string {
	t.Helper()
	var total string
	err := direct(t, shard, "store").QueryRow(context.Background(),
		"SELECT total::text FROM orders WHERE order_id = $1 AND customer_id = $2", atomicOrder, customer).Scan(&total)
	if err != nil {
		t.Fatalf("%s: %v", shard, err)
	}
	return total
}

// decisions counts the commit decisions on a shard's store database (0
// before the first atomic commit made the table).
func decisions(t *testing.T, shard string) int {
	t.Helper()
	conn := direct(t, shard, "store")
	var exists bool
	if err := conn.QueryRow(context.Background(), "SELECT to_regclass('_tessera.commit_decisions') IS NOT NULL").Scan(&exists); err != nil {
		t.Fatal(err)
	}
	if !exists {
		return 0
	}
	var n int
	if err := conn.QueryRow(context.Background(), "SELECT count(*) FROM _tessera.commit_decisions WHERE outcome = 'commit'").Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

// preparedOn lists the transactions prepared on a shard's primary.
func preparedOn(t *testing.T, shard string) []string {
	t.Helper()
	rows, err := direct(t, shard, "postgres").Query(context.Background(), "SELECT gid FROM pg_prepared_xacts ORDER BY gid")
	if err != nil {
		t.Fatal(err)
	}
	gids, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return gids
}

func noPrepared(t *testing.T) {
	t.Helper()
	for _, s := range []string{"customer-shard-1", "customer-shard-2"} {
		if gids := preparedOn(t, s); len(gids) > 0 {
			t.Fatalf("%s still has prepared transactions %v", s, gids)
		}
	}
}

func execIn(t *testing.T, conn *pgx.Conn, mode pgx.QueryExecMode, sql string) {
	t.Helper()
	if _, err := conn.Exec(context.Background(), sql, mode); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
}

// TestAtomicCommitTwoShards: a transfer between accounts on two shards
// commits on both, records its decision on the commit point (the first
// shard written), leaves nothing prepared, and the client's next
// statement sees both writes; in both query protocols.
func TestAtomicCommitTwoShards(t *testing.T) {
	conn := connect(t, "store")
	atomicSetup(t, conn)
	for i, mode := range atomicModes {
		before := decisions(t, "customer-shard-1")
		execIn(t, conn, mode, "BEGIN")
		execIn(t, conn, mode, fmt.Sprintf("UPDATE orders SET total = total - 10 WHERE order_id = %d AND customer_id = 42", atomicOrder))
		execIn(t, conn, mode, fmt.Sprintf("UPDATE orders SET total = total + 10 WHERE order_id = %d AND customer_id = 1", atomicOrder))
		execIn(t, conn, mode, "COMMIT")
		var a, b string
		if err := conn.QueryRow(context.Background(), fmt.Sprintf(
			"SELECT (SELECT total::text FROM orders WHERE order_id = %d AND customer_id = 42), (SELECT total::text FROM orders WHERE order_id = %d AND customer_id = 1)",
			atomicOrder, atomicOrder), mode).Scan(&a, &b); err != nil {
			// A subquery per shard may not be supported: read one by one.
			if err := conn.QueryRow(context.Background(), fmt.Sprintf("SELECT total::text FROM orders WHERE order_id = %d AND customer_id = 42", atomicOrder), mode).Scan(&a); err != nil {
				t.Fatal(err)
			}
			if err := conn.QueryRow(context.Background(), fmt.Sprintf("SELECT total::text FROM orders WHERE order_id = %d AND customer_id = 1", atomicOrder), mode).Scan(&b); err != nil {
				t.Fatal(err)
			}
		}
		want42, want1 := fmt.Sprint(90-10*i), fmt.Sprint(110+10*i)
		if a != want42 || b != want1 {
			t.Fatalf("mode %v: after the transfer the router reads %s and %s, want %s and %s", mode, a, b, want42, want1)
		}
		if x, y := balanceOn(t, "customer-shard-1", 42), balanceOn(t, "customer-shard-2", 1); x != want42 || y != want1 {
			t.Fatalf("mode %v: the shards hold %s and %s, want %s and %s", mode, x, y, want42, want1)
		}
		if after := decisions(t, "customer-shard-1"); after != before+1 {
			t.Fatalf("mode %v: %d commit decisions on the commit point, want %d", mode, after, before+1)
		}
		noPrepared(t)
	}
}

// TestAtomicCommitParticipantLost: the participant's backend dies before
// COMMIT, so it cannot prepare: the client gets an error and nothing is
// committed anywhere, the commit point's write included.
func TestAtomicCommitParticipantLost(t *testing.T) {
	conn := connect(t, "store")
	atomicSetup(t, conn)
	for _, mode := range atomicModes {
		execIn(t, conn, mode, "BEGIN")
		execIn(t, conn, mode, fmt.Sprintf("UPDATE orders SET total = total - 10 WHERE order_id = %d AND customer_id = 42", atomicOrder))
		var pid int
		if err := conn.QueryRow(context.Background(), fmt.Sprintf(
			"UPDATE orders SET total = total + 10 WHERE order_id = %d AND customer_id = 1 RETURNING pg_backend_pid()", atomicOrder), mode).Scan(&pid); err != nil {
			t.Fatal(err)
		}
		if _, err := direct(t, "customer-shard-2", "postgres").Exec(context.Background(), "SELECT pg_terminate_backend($1)", pid); err != nil {
			t.Fatal(err)
		}
		_, err := conn.Exec(context.Background(), "COMMIT", mode)
		if err == nil {
			t.Fatalf("mode %v: COMMIT succeeded although a participant was lost", mode)
		}
		t.Logf("mode %v: COMMIT: %v", mode, err)
		conn.Exec(context.Background(), "ROLLBACK", mode)
		if x, y := balanceOn(t, "customer-shard-1", 42), balanceOn(t, "customer-shard-2", 1); x != "100" || y != "100" {
			t.Fatalf("mode %v: the shards hold %s and %s after a failed commit, want 100 and 100", mode, x, y)
		}
		noPrepared(t)
		// The session goes on.
		execIn(t, conn, mode, fmt.Sprintf("UPDATE orders SET total = 100 WHERE order_id = %d", atomicOrder))
	}
}

// TestCommitOneShardOrBestEffort: a transaction that wrote on one shard
// (reading another), and any transaction under tessera.commit
// best_effort, commits without two-phase commit: no decision row.
func TestCommitOneShardOrBestEffort(t *testing.T) {
	conn := connect(t, "store")
	atomicSetup(t, conn)
	mustExec(t, conn, "BEGIN",
		fmt.Sprintf("SELECT total FROM orders WHERE order_id = %d AND customer_id = 1", atomicOrder),
		fmt.Sprintf("UPDATE orders SET total = 50 WHERE order_id = %d AND customer_id = 42", atomicOrder))
	before1, before2 := decisions(t, "customer-shard-1"), decisions(t, "customer-shard-2")
	mustExec(t, conn, "COMMIT")
	if balanceOn(t, "customer-shard-1", 42) != "50" {
		t.Fatal("the one-shard write was not committed")
	}
	mustExec(t, conn, "SET tessera.commit = 'best_effort'", "BEGIN",
		fmt.Sprintf("UPDATE orders SET total = 60 WHERE order_id = %d AND customer_id = 42", atomicOrder),
		fmt.Sprintf("UPDATE orders SET total = 60 WHERE order_id = %d AND customer_id = 1", atomicOrder),
		"COMMIT")
	if x, y := balanceOn(t, "customer-shard-1", 42), balanceOn(t, "customer-shard-2", 1); x != "60" || y != "60" {
		t.Fatalf("best_effort: the shards hold %s and %s, want 60 and 60", x, y)
	}
	if a, b := decisions(t, "customer-shard-1"), decisions(t, "customer-shard-2"); a != before1 || b != before2 {
		t.Fatalf("commit decisions went from %d, %d to %d, %d: a commit used two-phase commit", before1, before2, a, b)
	}
	var v string
	if err := conn.QueryRow(context.Background(), "SHOW tessera.commit").Scan(&v); err != nil || v != "best_effort" {
		t.Fatalf("SHOW tessera.commit: %q, %v", v, err)
	}
	if _, err := conn.Exec(context.Background(), "SET tessera.commit = 'sometimes'"); sqlstate(err) != "22023" {
		t.Fatalf("SET tessera.commit = 'sometimes': %v, want 22023", err)
	}
	noPrepared(t)
}

// TestCommitDefaultOfTheRouter: a router started with Commit
// best_effort (tessera router --commit) commits a session that does not
// set tessera.commit shard after shard, and one that sets it atomic with
// two-phase commit; RESET returns to the router's default. A router with
// another value does not start.
func TestCommitDefaultOfTheRouter(t *testing.T) {
	if _, err := router.New(router.Config{ListenAddr: "127.0.0.1:0", Store: cluster.Store(), Secret: cluster.Secret(), Commit: "sometimes"}); err == nil {
		t.Fatal("a router with Commit \"sometimes\" was made")
	}
	addr := startRouterWith(t, router.Config{Commit: "best_effort"})
	ctx := context.Background()
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@%s/store?sslmode=disable", addr))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	atomicSetup(t, conn)
	transfer := func(total int) {
		t.Helper()
		mustExec(t, conn, "BEGIN",
			fmt.Sprintf("UPDATE orders SET total = %d WHERE order_id = %d AND customer_id = 42", total, atomicOrder),
			fmt.Sprintf("UPDATE orders SET total = %d WHERE order_id = %d AND customer_id = 1", total, atomicOrder),
			"COMMIT")
		if x, y := balanceOn(t, "customer-shard-1", 42), balanceOn(t, "customer-shard-2", 1); x != fmt.Sprint(total) || y != fmt.Sprint(total) {
			t.Fatalf("the shards hold %s and %s, want %d", x, y, total)
		}
	}
	show := func(want string) {
		t.Helper()
		var v string
		// The simple protocol: the router answers SHOW tessera.* there
		// (in the extended one a shard answers from the session's
		// settings, which hold tessera.commit only once SET).
		if err := conn.QueryRow(ctx, "SHOW tessera.commit", pgx.QueryExecModeSimpleProtocol).Scan(&v); err != nil || v != want {
			t.Fatalf("SHOW tessera.commit: %q, %v; want %s", v, err, want)
		}
	}
	decided := func() int { return decisions(t, "customer-shard-1") + decisions(t, "customer-shard-2") }

	show("best_effort")
	before := decided()
	transfer(70)
	if n := decided(); n != before {
		t.Fatalf("under the router's best_effort default, commit decisions went from %d to %d", before, n)
	}
	mustExec(t, conn, "SET tessera.commit = 'atomic'")
	show("atomic")
	transfer(71)
	if n := decided(); n != before+1 {
		t.Fatalf("with tessera.commit atomic, commit decisions went from %d to %d, want one more", before, n)
	}
	mustExec(t, conn, "RESET tessera.commit")
	show("best_effort")
	transfer(72)
	if n := decided(); n != before+1 {
		t.Fatalf("after RESET, commit decisions went from %d to %d: not the router's default", before+1, n)
	}
	noPrepared(t)
}

// failAtCommit makes customer-shard-2 refuse, at commit (or PREPARE
// TRANSACTION), a transaction that set an account's balance to -999: a
// deferred constraint trigger made there directly, dropped at the end.
func failAtCommit(t *testing.T) {
	t.Helper()
	conn := direct(t, "customer-shard-2", "store")
	ctx := context.Background()
	for _, sql := range []string{
		`CREATE OR REPLACE FUNCTION atomic_refuse() RETURNS trigger LANGUAGE plpgsql AS
		 $$BEGIN IF NEW.total = -999 THEN RAISE EXCEPTION 'refused at commit' USING ERRCODE = '23514'; END IF; RETURN NEW; END$$`,
		"DROP TRIGGER IF EXISTS atomic_refuse ON orders",
		"CREATE CONSTRAINT TRIGGER atomic_refuse AFTER UPDATE ON orders DEFERRABLE INITIALLY DEFERRED FOR EACH ROW EXECUTE FUNCTION atomic_refuse()",
	} {
		if _, err := conn.Exec(ctx, sql); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		c := direct(t, "customer-shard-2", "store")
		c.Exec(context.Background(), "DROP TRIGGER IF EXISTS atomic_refuse ON orders")
		c.Exec(context.Background(), "DROP FUNCTION IF EXISTS atomic_refuse()")
	})
}

// TestAtomicCommitParticipantRefuses: a participant whose PREPARE fails
// (a deferred constraint) leaves nothing committed, in an explicit
// transaction and in a scatter UPDATE outside one; a scatter UPDATE that
// succeeds commits atomically (a decision row).
func TestAtomicCommitParticipantRefuses(t *testing.T) {
	conn := connect(t, "store")
	atomicSetup(t, conn)
	failAtCommit(t)
	ctx := context.Background()
	for _, mode := range atomicModes {
		execIn(t, conn, mode, "BEGIN")
		execIn(t, conn, mode, fmt.Sprintf("UPDATE orders SET total = 1 WHERE order_id = %d AND customer_id = 42", atomicOrder))
		execIn(t, conn, mode, fmt.Sprintf("UPDATE orders SET total = -999 WHERE order_id = %d AND customer_id = 1", atomicOrder))
		if _, err := conn.Exec(ctx, "COMMIT", mode); sqlstate(err) != "23514" {
			t.Fatalf("mode %v: COMMIT: %v, want the participant's 23514", mode, err)
		}
		conn.Exec(ctx, "ROLLBACK", mode)
		if x, y := balanceOn(t, "customer-shard-1", 42), balanceOn(t, "customer-shard-2", 1); x != "100" || y != "100" {
			t.Fatalf("mode %v: the shards hold %s and %s after a refused commit, want 100 and 100", mode, x, y)
		}
		// Outside a transaction: a scatter UPDATE (no shard key).
		tag, err := conn.Exec(ctx, fmt.Sprintf("UPDATE orders SET total = -999 WHERE order_id = %d", atomicOrder), mode)
		if sqlstate(err) != "23514" {
			t.Fatalf("mode %v: scatter UPDATE: %v (%s), want the participant's 23514", mode, err, tag)
		}
		if x, y := balanceOn(t, "customer-shard-1", 42), balanceOn(t, "customer-shard-2", 1); x != "100" || y != "100" {
			t.Fatalf("mode %v: the shards hold %s and %s after a refused scatter UPDATE, want 100 and 100", mode, x, y)
		}
		noPrepared(t)
	}
	before := decisions(t, "customer-shard-1") + decisions(t, "customer-shard-2")
	tag, err := conn.Exec(ctx, fmt.Sprintf("UPDATE orders SET total = total + 1 WHERE order_id = %d", atomicOrder))
	if err != nil || tag.String() != "UPDATE 2" {
		t.Fatalf("scatter UPDATE: %s, %v", tag, err)
	}
	if x, y := balanceOn(t, "customer-shard-1", 42), balanceOn(t, "customer-shard-2", 1); x != "101" || y != "101" {
		t.Fatalf("the shards hold %s and %s after a scatter UPDATE, want 101 and 101", x, y)
	}
	if after := decisions(t, "customer-shard-1") + decisions(t, "customer-shard-2"); after != before+1 {
		t.Fatalf("%d commit decisions after a scatter UPDATE, want %d", after, before+1)
	}
	noPrepared(t)
}

// TestClientPrepareTransaction: a client's PREPARE TRANSACTION runs on its
// transaction's one shard, and is refused (0A000) over several or with a
// gid of Tessera's; the refused transaction then rolls back.
func TestClientPrepareTransaction(t *testing.T) {
	conn := connect(t, "store")
	atomicSetup(t, conn)
	ctx := context.Background()
	mustExec(t, conn, "BEGIN",
		fmt.Sprintf("UPDATE orders SET total = 5 WHERE order_id = %d AND customer_id = 42", atomicOrder),
		"PREPARE TRANSACTION 'atomic_test_client'")
	if gids := preparedOn(t, "customer-shard-1"); !slices.Contains(gids, "atomic_test_client") {
		t.Fatalf("customer-shard-1 has prepared %v, want atomic_test_client", gids)
	}
	mustExec(t, direct(t, "customer-shard-1", "store"), "COMMIT PREPARED 'atomic_test_client'")
	if b := balanceOn(t, "customer-shard-1", 42); b != "5" {
		t.Fatalf("customer 42 has %s after COMMIT PREPARED, want 5", b)
	}
	for _, tc := range []struct{ name, gid string }{{"several shards", "atomic_test_two"}, {"reserved gid", "tessera:x:y:1"}} {
		mustExec(t, conn, "BEGIN",
			fmt.Sprintf("UPDATE orders SET total = 6 WHERE order_id = %d AND customer_id = 42", atomicOrder))
		if tc.name == "several shards" {
			mustExec(t, conn, fmt.Sprintf("UPDATE orders SET total = 6 WHERE order_id = %d AND customer_id = 1", atomicOrder))
		}
		if _, err := conn.Exec(ctx, "PREPARE TRANSACTION '"+tc.gid+"'"); sqlstate(err) != "0A000" {
			t.Fatalf("%s: PREPARE TRANSACTION: %v, want 0A000", tc.name, err)
		}
		mustExec(t, conn, "COMMIT") // rolls back: the transaction failed
		if x, y := balanceOn(t, "customer-shard-1", 42), balanceOn(t, "customer-shard-2", 1); x != "5" || y != "100" {
			t.Fatalf("%s: the shards hold %s and %s, want 5 and 100", tc.name, x, y)
		}
		noPrepared(t)
	}
}

// TestAtomicCommitNeedsSyncDurability: two-phase commit over a shard
// whose durability is async is refused (0A000) and nothing commits: a
// failover there could lose a prepared part or a decision.
func TestAtomicCommitNeedsSyncDurability(t *testing.T) {
	conn := connect(t, "store")
	atomicSetup(t, conn)
	setDurability := func(d store.Durability) {
		if _, err := cluster.Store().UpdateShardState(context.Background(), "customer-shard-2", func(st *store.ShardState) error {
			st.Durability = d
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	setDurability(store.DurabilityAsync)
	t.Cleanup(func() { setDurability(store.DurabilitySync) })
	ctx := context.Background()
	// The router follows shard states by a watch: try until it refuses.
	deadline := time.Now().Add(10 * time.Second)
	for {
		mustExec(t, conn, "BEGIN",
			fmt.Sprintf("UPDATE orders SET total = 100 WHERE order_id = %d AND customer_id = 42", atomicOrder),
			fmt.Sprintf("UPDATE orders SET total = 100 WHERE order_id = %d AND customer_id = 1", atomicOrder),
			fmt.Sprintf("UPDATE orders SET total = total + 1 WHERE order_id = %d", atomicOrder))
		_, err := conn.Exec(ctx, "COMMIT")
		if sqlstate(err) == "0A000" {
			break
		}
		if err != nil || time.Now().After(deadline) {
			t.Fatalf("COMMIT over an async shard: %v, want 0A000", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if x, y := balanceOn(t, "customer-shard-1", 42), balanceOn(t, "customer-shard-2", 1); x != "100" || y != "100" {
		t.Fatalf("the shards hold %s and %s after a refused commit, want 100 and 100", x, y)
	}
	noPrepared(t)
	mustExec(t, conn, "SET tessera.commit = 'best_effort'", "BEGIN",
		fmt.Sprintf("UPDATE orders SET total = total + 1 WHERE order_id = %d", atomicOrder), "COMMIT")
	if x, y := balanceOn(t, "customer-shard-1", 42), balanceOn(t, "customer-shard-2", 1); x != "101" || y != "101" {
		t.Fatalf("best_effort over an async shard: the shards hold %s and %s, want 101 and 101", x, y)
	}
}
