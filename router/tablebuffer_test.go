package router_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/router"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
)

// setTableBuffer asks every router to hold the store database's tables
// for holdFor, and clears the signal when the test ends.
func setTableBuffer(t *testing.T, id string, holdFor time.Duration, tables ...string) {
	t.Helper()
	err := cluster.Store().SetTableBuffer(context.Background(), store.TableBuffer{ID: id, Database: "store", Tables: tables,
		Reason: "test cutover", For: holdFor, Set: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { clearTableBuffer(t, id) })
	time.Sleep(200 * time.Millisecond) // the routers see the signal
}

func clearTableBuffer(t *testing.T, id string) {
	t.Helper()
	if err := cluster.Store().ClearTableBuffer(context.Background(), id); err != nil {
		t.Fatal(err)
	}
}

// asyncExec runs sql with args on conn in the background.
func asyncExec(conn *pgx.Conn, sql string, args ...any) <-chan error {
	done := make(chan error, 1)
	go func() {
		_, err := conn.Exec(context.Background(), sql, args...)
		done <- err
	}()
	return done
}

// stillHeld fails the test if done reports within d.
func stillHeld(t *testing.T, what string, done <-chan error, d time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		t.Fatalf("%s ran while its table was buffered (err %v)", what, err)
	case <-time.After(d):
	}
}

// released fails the test unless done reports success within d.
func released(t *testing.T, what string, done <-chan error, d time.Duration) {
	t.Helper()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("%s failed after it was released: %v", what, err)
		}
	case <-time.After(d):
		t.Fatalf("%s was not released", what)
	}
}

// quick fails the test unless sql runs on conn within 2 s, far less than
// the 20 s a held statement would wait (or its 10 s window).
func quick(t *testing.T, conn *pgx.Conn, sql string, args ...any) {
	t.Helper()
	start := time.Now()
	if _, err := conn.Exec(context.Background(), sql, args...); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	if d := time.Since(start); d > 2*time.Second {
		t.Fatalf("%s took %v: it was held", sql, d)
	}
}

func count(t *testing.T, conn *pgx.Conn, sql string) int {
	t.Helper()
	var n int
	if err := conn.QueryRow(context.Background(), sql, pgx.QueryExecModeSimpleProtocol).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

func TestTableBufferHoldsOnlyItsTables(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	admin := connect(t, "store")
	mustExec(t, admin, "CREATE TABLE IF NOT EXISTS tb_held (id int)", "CREATE TABLE IF NOT EXISTS tb_free (id int)")
	other := connect(t, "postgres")
	mustExec(t, other, "CREATE TABLE IF NOT EXISTS tb_held (id int)")
	setTableBuffer(t, "test-holds-only", 20*time.Second, "public.tb_held")

	simple := connect(t, "store")
	start := time.Now()
	heldSimple := asyncExec(simple, "INSERT INTO tb_held VALUES (1)", pgx.QueryExecModeSimpleProtocol)
	extended := connect(t, "store")
	heldExtended := asyncExec(extended, "INSERT INTO tb_held VALUES ($1)", 2)
	// A transaction that has run nothing yet is placed by its first
	// statement: it waits too.
	begun := connect(t, "store")
	tx, err := begun.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback(ctx)
	heldInTx := make(chan error, 1)
	go func() {
		_, err := tx.Exec(ctx, "INSERT INTO tb_held VALUES (3)")
		heldInTx <- err
	}()

	// Other tables, and the same name in another database, go on; so
	// does a transaction already open on the shard.
	quick(t, admin, "INSERT INTO tb_free VALUES (1)")
	quick(t, other, "INSERT INTO tb_held VALUES (1)")
	open := connect(t, "store")
	otx, err := open.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer otx.Rollback(ctx)
	quick(t, open, "INSERT INTO tb_free VALUES (2)")
	quick(t, open, "INSERT INTO tb_held VALUES (4)")
	if err := otx.Commit(ctx); err != nil {
		t.Fatal(err)
	}

	stillHeld(t, "an autocommit INSERT", heldSimple, 300*time.Millisecond)
	stillHeld(t, "an extended-protocol INSERT", heldExtended, 10*time.Millisecond)
	stillHeld(t, "a transaction's first INSERT", heldInTx, 10*time.Millisecond)
	// Read behind the router's back: a read of tb_held waits too.
	if n := count(t, direct(t, "shard-0", "store"), "SELECT count(*) FROM tb_held"); n != 1 {
		t.Fatalf("%d rows in tb_held while it is buffered, want the open transaction's 1", n)
	}
	clearTableBuffer(t, "test-holds-only")
	released(t, "an autocommit INSERT", heldSimple, 5*time.Second)
	released(t, "an extended-protocol INSERT", heldExtended, 5*time.Second)
	released(t, "a transaction's first INSERT", heldInTx, 5*time.Second)
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	t.Logf("held for %v", time.Since(start))
	if n := count(t, admin, "SELECT count(*) FROM tb_held"); n != 4 {
		t.Fatalf("%d rows in tb_held, want 4", n)
	}
}

// storeRouter starts a router of its own with buf and connects to its
// store database.
func storeRouter(t *testing.T, buf router.BufferConfig) string {
	t.Helper()
	return fmt.Sprintf("postgres://postgres:postgres@%s/store?sslmode=disable", startRouter(t, buf))
}

func connectTo(t *testing.T, dsn string) *pgx.Conn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close(context.Background()) })
	return conn
}

func TestTableBufferLimits(t *testing.T) {
	t.Parallel()
	admin := connect(t, "store")
	mustExec(t, admin, "CREATE TABLE IF NOT EXISTS tb_limits (id int)")
	small := storeRouter(t, router.BufferConfig{Window: 600 * time.Millisecond, Size: 1})
	// A router registers with the revision of the topology it routes by.
	snap, err := cluster.Store().GetTopology(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	recs, err := cluster.Store().ListRecords(context.Background(), store.KindRouter)
	if err != nil {
		t.Fatal(err)
	}
	registered := false
	for _, rec := range recs {
		if strings.Contains(small, "@"+rec.Addr+"/") {
			registered = true
			if rec.TopologyRevision != snap.Revision {
				t.Fatalf("a new router's record says topology revision %d, want %d", rec.TopologyRevision, snap.Revision)
			}
		}
	}
	if !registered {
		t.Fatalf("no router record for %s among %d", small, len(recs))
	}
	first, second := connectTo(t, small), connectTo(t, small)
	setTableBuffer(t, "test-limits", 20*time.Second, "public.tb_limits")

	// One statement waits its window out; the other finds the buffer
	// full at once (which is which depends on which arrives first).
	start := time.Now()
	type result struct {
		err   error
		after time.Duration
	}
	results := make(chan result, 2)
	for i, conn := range []*pgx.Conn{first, second} {
		go func() {
			_, err := conn.Exec(context.Background(), fmt.Sprintf("INSERT INTO tb_limits VALUES (%d)", i))
			results <- result{err, time.Since(start)}
		}()
	}
	full, window := 0, 0
	for range 2 {
		select {
		case r := <-results:
			switch {
			case sqlstate(r.err) == "57P03" && strings.Contains(r.err.Error(), "buffer is full"):
				full++
			case sqlstate(r.err) == "57P03" && strings.Contains(r.err.Error(), "did not end within 600ms") && r.after >= 500*time.Millisecond:
				window++
			default:
				t.Fatalf("a statement got %v after %v, want 57P03: the buffer is full, or the window of 600ms passed", r.err, r.after)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("a statement waited beyond its window")
		}
	}
	if full != 1 || window != 1 {
		t.Fatalf("%d statements found the buffer full and %d waited out the window, want one each", full, window)
	}
	if n := count(t, direct(t, "shard-0", "store"), "SELECT count(*) FROM tb_limits"); n != 0 {
		t.Fatalf("%d rows in tb_limits, want none: both statements were refused", n)
	}
}

func TestTableBufferForRunsOut(t *testing.T) {
	t.Parallel()
	admin := connect(t, "store")
	mustExec(t, admin, "CREATE TABLE IF NOT EXISTS tb_expiry (id int)")
	// 2 s: long enough that a slow connect on a loaded machine still
	// finds the signal up (it was 900 ms, and timing-sensitive).
	setTableBuffer(t, "test-expiry", 2*time.Second, "public.tb_expiry")
	// The signal stays stored: this router's own clock ends it.
	start := time.Now()
	held := asyncExec(connect(t, "store"), "INSERT INTO tb_expiry VALUES (1)")
	stillHeld(t, "an INSERT", held, 400*time.Millisecond)
	released(t, "an INSERT", held, 8*time.Second)
	if d := time.Since(start); d < 1500*time.Millisecond {
		t.Fatalf("released after %v, before the signal's 2s ran out", d)
	}
	if n := count(t, admin, "SELECT count(*) FROM tb_expiry"); n != 1 {
		t.Fatalf("%d rows in tb_expiry, want 1", n)
	}
}

// withProbeGroup returns the topology with table store.public.<table>
// placed in a shard group of its own on shard, or, when shard is empty,
// without that table listed (it then lives on the default group's
// shard-0).
func withProbeGroup(t *testing.T, base *topo.Topology, table, shard string) *topo.Topology {
	t.Helper()
	return editTopology(t, base, func(doc map[string]any) {
		if shard != "" {
			doc["shard_groups"] = append(doc["shard_groups"].([]any), map[string]any{"uid": "cutover_probe",
				"key_ranges": []any{map[string]any{"shard_uid": shard}}})
			storeTables(doc)[table] = map[string]any{"shard_group": "cutover_probe"}
		}
	})
}

// applyTopology stores top as a data-movement workflow would and waits
// until every live router reports routing by it.
func applyTopology(t *testing.T, top *topo.Topology) int64 {
	t.Helper()
	ctx := context.Background()
	rev, err := cluster.Store().ApplyTopology(ctx, top, store.ApplyOptions{ExpectedRevision: store.AnyRevision, Force: true})
	if err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	for {
		recs, err := cluster.Store().ListRecords(ctx, store.KindRouter)
		if err != nil {
			t.Fatal(err)
		}
		behind := 0
		for _, rec := range recs {
			if rec.TopologyRevision < rev {
				behind++
			}
		}
		if len(recs) > 0 && behind == 0 {
			t.Logf("%d routers reported revision %d after %v", len(recs), rev, time.Since(start))
			return rev
		}
		if time.Since(start) > 5*time.Second {
			t.Fatalf("%d of %d routers did not report topology revision %d", behind, len(recs), rev)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// The cutover tests move a table between shards in the topology, which
// every session plans by: they do not run in parallel with the others.

func TestCutoverSendsHeldAndFencedStatementsToTheNewShard(t *testing.T) {
	ctx := context.Background()
	snap, err := cluster.Store().GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	base := snap.Topology
	t.Cleanup(func() { applyTopology(t, base) })
	const table = "cutover_probe"
	source, target := direct(t, "shard-0", "store"), direct(t, "customer-shard-1", "store")
	for _, c := range []*pgx.Conn{source, target} {
		mustExec(t, c, "DROP TABLE IF EXISTS "+table, "CREATE TABLE "+table+" (id int PRIMARY KEY)")
	}
	t.Cleanup(func() {
		for _, c := range []*pgx.Conn{source, target} {
			c.Exec(context.Background(), "DROP TABLE IF EXISTS "+table)
		}
	})
	where := func(id int) string {
		t.Helper()
		on := ""
		for name, c := range map[string]*pgx.Conn{"shard-0": source, "customer-shard-1": target} {
			if count(t, c, fmt.Sprintf("SELECT count(*) FROM %s WHERE id = %d", table, id)) > 0 {
				on += name
			}
		}
		return on
	}

	// A write the fence refuses, outside a transaction, waits for the
	// topology that moves the table, and then runs on the new shard.
	mustExec(t, source, `CREATE FUNCTION cutover_fence() RETURNS trigger LANGUAGE plpgsql AS $$
		BEGIN RAISE EXCEPTION '`+pgerr.CutoverFencePrefix+`table public.`+table+` has moved to other shards' USING ERRCODE = '25006'; END $$`,
		"CREATE TRIGGER cutover_fence BEFORE INSERT OR UPDATE OR DELETE ON "+table+" FOR EACH STATEMENT EXECUTE FUNCTION cutover_fence()")
	t.Cleanup(func() { source.Exec(context.Background(), "DROP FUNCTION IF EXISTS cutover_fence() CASCADE") })
	simple, extended, inTx := connect(t, "store"), connect(t, "store"), connect(t, "store")
	fencedSimple := asyncExec(simple, "INSERT INTO "+table+" VALUES (1)", pgx.QueryExecModeSimpleProtocol)
	fencedExtended := asyncExec(extended, "INSERT INTO "+table+" VALUES ($1) RETURNING id", 2)
	// In a transaction the fence's error is the client's.
	tx, err := inTx.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	_, err = tx.Exec(ctx, "INSERT INTO "+table+" VALUES (3)")
	var pe *pgconn.PgError
	if !errors.As(err, &pe) || pe.Code != pgerr.ReadOnlySQLTransaction || !strings.HasPrefix(pe.Message, pgerr.CutoverFencePrefix) {
		t.Fatalf("a fenced write in a transaction: %v, want the fence's 25006", err)
	}
	tx.Rollback(ctx)
	stillHeld(t, "a fenced autocommit INSERT", fencedSimple, 300*time.Millisecond)
	stillHeld(t, "a fenced extended-protocol INSERT", fencedExtended, 10*time.Millisecond)
	start := time.Now()
	moved := withProbeGroup(t, base, table, "customer-shard-1")
	applyTopology(t, moved)
	released(t, "a fenced autocommit INSERT", fencedSimple, 5*time.Second)
	released(t, "a fenced extended-protocol INSERT", fencedExtended, 5*time.Second)
	t.Logf("fenced writes ran %v after the topology moved their table", time.Since(start))
	for _, id := range []int{1, 2} {
		if on := where(id); on != "customer-shard-1" {
			t.Fatalf("row %d is on %q, want customer-shard-1 only", id, on)
		}
	}
	if on := where(3); on != "" {
		t.Fatalf("the transaction's fenced row 3 is on %q", on)
	}

	// A statement held by a table buffer is planned again when the
	// buffer clears: the topology that changed meanwhile sends it back.
	mustExec(t, source, "DROP FUNCTION cutover_fence() CASCADE")
	setTableBuffer(t, "test-cutover", 20*time.Second, "public."+table)
	held := asyncExec(simple, "INSERT INTO "+table+" VALUES (4)")
	heldExtended := asyncExec(extended, "INSERT INTO "+table+" VALUES ($1) RETURNING id", 5)
	stillHeld(t, "a buffered INSERT", held, 300*time.Millisecond)
	applyTopology(t, withProbeGroup(t, base, table, ""))
	stillHeld(t, "a buffered INSERT", held, 100*time.Millisecond)
	clearTableBuffer(t, "test-cutover")
	released(t, "a buffered INSERT", held, 5*time.Second)
	released(t, "a buffered extended-protocol INSERT", heldExtended, 5*time.Second)
	for _, id := range []int{4, 5} {
		if on := where(id); on != "shard-0" {
			t.Fatalf("row %d is on %q, want shard-0 only, where the topology moved the table while it waited", id, on)
		}
	}
}
