package router_test

import (
	"context"
	"crypto/md5"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"

	"github.com/tesseradb/tessera/router"
	"github.com/tesseradb/tessera/topo/store"
)

func sqlstate(err error) string {
	var pe *pgconn.PgError
	if errors.As(err, &pe) {
		return pe.Code
	}
	return ""
}

func TestAuthentication(t *testing.T) {
	ctx := context.Background()
	addr := cluster.Info().Router
	cases := []struct{ dsn, code string }{
		{fmt.Sprintf("postgres://postgres:wrong@%s/postgres?sslmode=disable", addr), "28P01"},
		{fmt.Sprintf("postgres://nobody:x@%s/postgres?sslmode=disable", addr), "28P01"},
		{fmt.Sprintf("postgres://postgres:postgres@%s/nodb?sslmode=disable", addr), "3D000"},
	}
	for _, c := range cases {
		conn, err := pgx.Connect(ctx, c.dsn)
		if err == nil {
			conn.Close(ctx)
		}
		if sqlstate(err) != c.code {
			t.Errorf("%s: %v, want SQLSTATE %s", c.dsn, err, c.code)
		}
	}
	// A role created through the router can log in at once, with md5 too.
	admin := connect(t, "postgres")
	admin.Exec(ctx, "DROP ROLE IF EXISTS alice, bob")
	if _, err := admin.Exec(ctx, "CREATE ROLE alice LOGIN PASSWORD 'wonderland'"); err != nil {
		t.Fatal(err)
	}
	if _, err := admin.Exec(ctx, "SET password_encryption = 'md5'; CREATE ROLE bob LOGIN PASSWORD 'builder'"); err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{"alice:wonderland", "bob:builder"} {
		conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://%s@%s/postgres?sslmode=disable", u, addr))
		if err != nil {
			t.Fatalf("%s: %v", u, err)
		}
		var who string
		conn.QueryRow(ctx, "SELECT current_user").Scan(&who)
		conn.Close(ctx)
		if !strings.HasPrefix(u, who+":") {
			t.Errorf("logged in as %q", who)
		}
	}
	// ALTER ROLE ... PASSWORD takes effect for the next connection.
	if _, err := admin.Exec(ctx, "ALTER ROLE alice PASSWORD 'looking-glass'"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, fmt.Sprintf("postgres://alice:looking-glass@%s/postgres?sslmode=disable", addr))
	if err != nil {
		t.Fatalf("new password: %v", err)
	}
	conn.Close(ctx)
	// TLS works with the dev cluster's certificate.
	conn, err = pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@%s/postgres?sslmode=require", addr))
	if err != nil {
		t.Fatalf("sslmode=require: %v", err)
	}
	defer conn.Close(ctx)
	if _, ok := conn.PgConn().Conn().(*tls.Conn); !ok {
		t.Error("sslmode=require did not use TLS")
	}
}

func TestRouterRegisters(t *testing.T) {
	recs, err := cluster.Store().ListRecords(context.Background(), store.KindRouter)
	if err != nil || len(recs) != 1 || recs[0].Addr != cluster.Info().Router {
		t.Fatalf("router records: %+v %v", recs, err)
	}
}

func TestSimpleQueriesAndErrors(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "postgres")
	var n int
	if err := conn.QueryRow(ctx, "SELECT 1 + 1").Scan(&n); err != nil || n != 2 {
		t.Fatalf("SELECT 1+1: %d %v", n, err)
	}
	_, err := conn.Exec(ctx, "SELECT * FROM no_such_table")
	if sqlstate(err) != "42P01" {
		t.Errorf("missing table: %v", err)
	}
	_, err = conn.Exec(ctx, "SELEC 1")
	if sqlstate(err) != "42601" {
		t.Errorf("syntax error: %v", err)
	}
	// The connection is still usable, and several statements in one
	// string run in order.
	res, err := conn.PgConn().Exec(ctx, "CREATE TEMP TABLE t1 (x int); INSERT INTO t1 VALUES (1), (2); SELECT sum(x) FROM t1").ReadAll()
	if err != nil || len(res) != 3 || string(res[2].Rows[0][0]) != "3" {
		t.Fatalf("multi-statement: %v %v", res, err)
	}
}

// TestShardedStore: tables of the store example are created everywhere,
// rows land on the shard `tessera topo route` names, and reads by key go
// to one shard while others scatter.
func TestShardedStore(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	mustExec(t, conn,
		"CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)",
		"CREATE TABLE IF NOT EXISTS orders (order_id bigint, customer_id bigint, total numeric, PRIMARY KEY (customer_id, order_id))",
	)
	for _, shard := range []string{"shard-0", "customer-shard-1", "customer-shard-2"} {
		var ok bool
		if err := direct(t, shard, "store").QueryRow(ctx, "SELECT to_regclass('customers') IS NOT NULL").Scan(&ok); err != nil || !ok {
			t.Errorf("%s lacks customers: %v", shard, err)
		}
	}
	// Simple protocol with literals, and extended with binary parameters.
	if _, err := conn.Exec(ctx, "INSERT INTO customers (customer_id, name) VALUES (42, 'forty-two')"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO customers (customer_id, name) VALUES ($1, $2)", int64(1), "one"); err != nil {
		t.Fatal(err)
	}
	for i := int64(100); i < 120; i++ {
		if _, err := conn.Exec(ctx, "INSERT INTO customers (customer_id, name) VALUES ($1, $2)", i, fmt.Sprint("c", i)); err != nil {
			t.Fatal(err)
		}
	}
	// Seed 002: 42 on customer-shard-1, 1 on customer-shard-2.
	where := map[int64]string{}
	for _, shard := range []string{"customer-shard-1", "customer-shard-2", "shard-0"} {
		// Its own rows: other tests keep theirs in ranges of their own.
		rows, _ := direct(t, shard, "store").Query(ctx, "SELECT customer_id FROM customers WHERE customer_id < 1000")
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatal(err)
		}
		for _, id := range ids {
			if where[id] != "" {
				t.Errorf("customer %d on %s and %s", id, where[id], shard)
			}
			where[id] = shard
		}
	}
	if where[42] != "customer-shard-1" || where[1] != "customer-shard-2" || len(where) != 22 {
		t.Fatalf("placement: %v", where)
	}
	// Every row is where the topology routes its key (tessera topo route).
	snap, err := cluster.Store().GetTopology(ctx)
	if err != nil {
		t.Fatal(err)
	}
	placement := snap.Topology.Resolve("store", "public", "customers")
	for id, shard := range where {
		if _, want, err := placement.RouteInt(id); err != nil || want != shard {
			t.Errorf("customer %d is on %s, the topology routes it to %s (%v)", id, shard, want, err)
		}
	}
	var name string
	if err := conn.QueryRow(ctx, "SELECT name FROM customers WHERE customer_id = $1", int64(42)).Scan(&name); err != nil || name != "forty-two" {
		t.Errorf("keyed read: %q %v", name, err)
	}
	if err := conn.QueryRow(ctx, "SELECT name FROM customers WHERE customer_id = 1").Scan(&name); err != nil || name != "one" {
		t.Errorf("keyed read by literal: %q %v", name, err)
	}
	var count int
	rows, err := conn.Query(ctx, "SELECT customer_id FROM customers WHERE name LIKE 'c%'")
	if err != nil {
		t.Fatal(err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil || len(ids) != 20 {
		t.Errorf("scatter read: %d rows, %v", len(ids), err)
	}
	tag, err := conn.Exec(ctx, "UPDATE customers SET name = name || '!' WHERE name LIKE 'c1%'")
	if err != nil || tag.RowsAffected() != 20 {
		t.Errorf("scatter update: %v %v", tag, err)
	}
	_, err = withoutGather(t, conn, "SELECT customer_id FROM customers ORDER BY lower(name)")
	if sqlstate(err) != "0A000" {
		t.Errorf("ORDER BY an expression across shards: %v, want 0A000", err)
	}
	_ = count
}

func TestTransactions(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)")
	conn.Exec(ctx, "DELETE FROM customers WHERE customer_id IN (7001, 7002, 7003)")
	// One transaction over two shards commits on both.
	tx, err := conn.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range []int64{7001, 7002, 7003} {
		if _, err := tx.Exec(ctx, "INSERT INTO customers (customer_id, name) VALUES ($1, 'tx')", id); err != nil {
			t.Fatal(err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		t.Fatal(err)
	}
	present := func(ids ...int64) int {
		n := 0
		for _, id := range ids {
			var c int
			if err := conn.QueryRow(ctx, "SELECT count(*) FROM customers WHERE customer_id = $1", id).Scan(&c); err != nil {
				t.Fatal(err)
			}
			n += c
		}
		return n
	}
	if n := present(7001, 7002, 7003); n != 3 {
		t.Errorf("committed %d rows, want 3", n)
	}
	// Rolled back everywhere.
	tx, _ = conn.Begin(ctx)
	tx.Exec(ctx, "DELETE FROM customers WHERE customer_id = 7001")
	tx.Exec(ctx, "DELETE FROM customers WHERE customer_id = 7002")
	tx.Rollback(ctx)
	if n := present(7001, 7002); n != 2 {
		t.Errorf("after rollback %d rows, want 2", n)
	}
	// tx_mode single refuses the second shard.
	if _, err := conn.Exec(ctx, "SET tessera.tx_mode = 'single'"); err != nil {
		t.Fatal(err)
	}
	tx, _ = conn.Begin(ctx)
	tx.Exec(ctx, "SELECT * FROM customers WHERE customer_id = 42")
	_, err = tx.Exec(ctx, "SELECT * FROM customers WHERE customer_id = 1")
	if sqlstate(err) != "0A000" {
		t.Errorf("second shard under tx_mode single: %v", err)
	}
	tx.Rollback(ctx)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		var v string
		if err := conn.QueryRow(ctx, "SHOW tessera.tx_mode", mode).Scan(&v); err != nil || v != "single" {
			t.Errorf("SHOW tessera.tx_mode (mode %v) = %q, %v", mode, v, err)
		}
	}
	// An aggregate over several shards that cannot be combined is
	// refused, not answered wrongly.
	_, err = withoutGather(t, conn, "SELECT string_agg(name, ',') FROM customers WHERE customer_id IN (7001, 7002, 7003)")
	if sqlstate(err) != "0A000" {
		t.Errorf("string_agg over two shards: %v, want 0A000", err)
	}
}

func TestSessionSettingsFollowTheClient(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "postgres")
	if _, err := conn.Exec(ctx, "SET application_name = 'tessera-test'"); err != nil {
		t.Fatal(err)
	}
	// Many statements, each perhaps on another pooled backend, all see it.
	for i := 0; i < 20; i++ {
		var v string
		if err := conn.QueryRow(ctx, "SELECT current_setting('application_name')").Scan(&v); err != nil || v != "tessera-test" {
			t.Fatalf("statement %d: %q %v", i, v, err)
		}
	}
	conn.Exec(ctx, "RESET application_name")
	var v string
	conn.QueryRow(ctx, "SHOW application_name").Scan(&v)
	if v == "tessera-test" {
		t.Error("RESET did not take")
	}
}

func TestExplainTessera(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)")
	rows, err := conn.Query(ctx, "EXPLAIN (TESSERA) SELECT * FROM customers WHERE customer_id = 42", pgx.QueryExecModeSimpleProtocol)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || !strings.Contains(strings.Join(lines, "\n"), "customer-shard-1") {
		t.Errorf("EXPLAIN (TESSERA): %q %v", lines, err)
	}
}

func TestCancel(t *testing.T) {
	conn := connect(t, "postgres")
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := conn.Exec(ctx, "SELECT pg_sleep(10)")
	if err == nil || time.Since(start) > 8*time.Second {
		t.Fatalf("pg_sleep was not cancelled: %v after %s", err, time.Since(start))
	}
}

// A CancelRequest that reaches another router than the session's (as
// behind a load balancer) still cancels the statement.
func TestCancelThroughAnotherRouter(t *testing.T) {
	conn := connect(t, "postgres")
	other := startRouter(t, router.BufferConfig{})
	done := make(chan error, 1)
	start := time.Now()
	go func() {
		_, err := conn.Exec(context.Background(), "SELECT pg_sleep(20)")
		done <- err
	}()
	time.Sleep(300 * time.Millisecond)
	req := make([]byte, 12, 16)
	binary.BigEndian.PutUint32(req[0:], 16)
	binary.BigEndian.PutUint32(req[4:], 80877102)
	binary.BigEndian.PutUint32(req[8:], conn.PgConn().PID())
	req = append(req, conn.PgConn().SecretKey()...)
	nc, err := net.Dial("tcp", other)
	if err != nil {
		t.Fatal(err)
	}
	nc.Write(req)
	io.Copy(io.Discard, nc) // the router closes once it has acted
	nc.Close()
	select {
	case err := <-done:
		if sqlstate(err) != "57014" {
			t.Fatalf("pg_sleep ended with %v, want 57014", err)
		}
		t.Logf("cancelled after %v", time.Since(start))
	case <-time.After(10 * time.Second):
		t.Fatal("the CancelRequest sent to another router did not cancel the statement")
	}
}

// TestNotificationsReachTheListener: LISTEN pins the session; a NOTIFY
// from another session reaches the listener while it waits, idle, as it
// does from Postgres (pgx's WaitForNotification, psycopg's notifies).
func TestNotificationsReachTheListener(t *testing.T) {
	ctx := context.Background()
	cfg, err := pgx.ParseConfig(dsn("postgres"))
	if err != nil {
		t.Fatal(err)
	}
	got := make(chan *pgconn.Notification, 4)
	cfg.OnNotification = func(_ *pgconn.PgConn, n *pgconn.Notification) { got <- n }
	listener, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer listener.Close(ctx)
	next := func(what string) *pgconn.Notification {
		t.Helper()
		select {
		case n := <-got:
			return n
		default:
		}
		wctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		defer cancel()
		if err := listener.PgConn().WaitForNotification(wctx); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		return <-got
	}
	if _, err := listener.Exec(ctx, "LISTEN tessera_news"); err != nil {
		t.Fatal(err)
	}
	notifier := connect(t, "postgres")
	// While the listener is idle, waiting: the notification comes unasked.
	for i, payload := range []string{"hello", "again"} {
		sent := make(chan error, 1)
		go func() {
			time.Sleep(200 * time.Millisecond)
			_, err := notifier.Exec(ctx, "NOTIFY tessera_news, '"+payload+"'")
			sent <- err
		}()
		n := next(fmt.Sprintf("notification %d", i))
		if err := <-sent; err != nil {
			t.Fatal(err)
		}
		if n.Channel != "tessera_news" || n.Payload != payload {
			t.Errorf("notification %d: %s %q", i, n.Channel, n.Payload)
		}
	}
	// The session goes on normally, and a notification sent meanwhile
	// arrives with a statement's answer too.
	if _, err := notifier.Exec(ctx, "NOTIFY tessera_news, 'third'"); err != nil {
		t.Fatal(err)
	}
	var x int
	if err := listener.QueryRow(ctx, "SELECT 41 + 1").Scan(&x); err != nil || x != 42 {
		t.Fatalf("a statement after notifications: %d, %v", x, err)
	}
	if n := next("third notification"); n.Payload != "third" {
		t.Fatalf("third notification: %q", n.Payload)
	}
}

// TestBatchAcrossShards: a pgx batch (one Sync) of statements for
// different shards runs each where it belongs, in order.
func TestBatchAcrossShards(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)")
	conn.Exec(ctx, "DELETE FROM customers WHERE customer_id BETWEEN 9000 AND 9020")
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec, pgx.QueryExecModeDescribeExec} {
		batch := &pgx.Batch{}
		for id := int64(9000); id < 9010; id++ {
			batch.Queue("INSERT INTO customers (customer_id, name) VALUES ($1, $2)", id, fmt.Sprint("batch-", mode))
		}
		for id := int64(9000); id < 9010; id++ {
			batch.Queue("SELECT name FROM customers WHERE customer_id = $1", id)
		}
		batch.Queue("DELETE FROM customers WHERE customer_id BETWEEN 9000 AND 9009")
		cfgConn := conn
		br := cfgConn.SendBatch(ctx, batch)
		for i := 0; i < 10; i++ {
			if _, err := br.Exec(); err != nil {
				t.Fatalf("mode %v insert %d: %v", mode, i, err)
			}
		}
		for i := 0; i < 10; i++ {
			var name string
			if err := br.QueryRow().Scan(&name); err != nil || name != fmt.Sprint("batch-", mode) {
				t.Fatalf("mode %v select %d: %q %v", mode, i, name, err)
			}
		}
		if tag, err := br.Exec(); err != nil || tag.RowsAffected() != 10 {
			t.Fatalf("mode %v delete: %v %v", mode, tag, err)
		}
		if err := br.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestTargetReplica(t *testing.T) {
	ctx := context.Background()
	cfg, _ := pgx.ParseConfig(dsn("store"))
	cfg.RuntimeParams["options"] = "-c tessera.target=replica"
	conn, err := pgx.ConnectConfig(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var inRecovery bool
	// Replicas may still be replaying CREATE DATABASE store.
	deadline := time.Now().Add(15 * time.Second)
	for {
		err = conn.QueryRow(ctx, "SELECT pg_is_in_recovery()", pgx.QueryExecModeSimpleProtocol).Scan(&inRecovery)
		if err == nil || sqlstate(err) != "3D000" || time.Now().After(deadline) {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || !inRecovery {
		t.Fatalf("read under tessera.target=replica ran on a primary: %v %v", inRecovery, err)
	}
	// A write is refused by the replica, never sent to the primary.
	if _, err := conn.Exec(ctx, "CREATE TABLE on_replica (x int)", pgx.QueryExecModeSimpleProtocol); err == nil {
		t.Error("DDL ran under tessera.target=replica")
	}
	// Back to the primary by SET.
	if _, err := conn.Exec(ctx, "SET tessera.target = 'primary'"); err != nil {
		t.Fatal(err)
	}
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()", pgx.QueryExecModeSimpleProtocol).Scan(&inRecovery); err != nil || inRecovery {
		t.Fatalf("after SET tessera.target = 'primary': %v %v", inRecovery, err)
	}
}

func TestFanoutGuard(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)")
	if _, err := conn.Exec(ctx, "SET tessera.fanout = 'multi'"); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "SELECT name FROM customers WHERE name = 'x'"); sqlstate(err) != "0A000" {
		t.Errorf("scatter under fanout multi: %v", err)
	}
	if _, err := conn.Exec(ctx, "SELECT name FROM customers WHERE customer_id IN (1, 42)"); err != nil {
		t.Errorf("two keyed shards under fanout multi: %v", err)
	}
	conn.Exec(ctx, "SET tessera.fanout = 'single'")
	if _, err := conn.Exec(ctx, "SELECT name FROM customers WHERE customer_id IN (1, 42)"); sqlstate(err) != "0A000" {
		t.Errorf("two shards under fanout single: %v", err)
	}
	if _, err := conn.Exec(ctx, "SELECT name FROM customers WHERE customer_id = 42"); err != nil {
		t.Errorf("one shard under fanout single: %v", err)
	}
}

// TestDDLFailureNamesTheShard: DDL runs on every shard; one that fails is
// named in the error.
func TestDDLFailureNamesTheShard(t *testing.T) {
	ctx := context.Background()
	if _, err := direct(t, "customer-shard-2", "store").Exec(ctx, "CREATE TABLE IF NOT EXISTS only_here (x int)"); err != nil {
		t.Fatal(err)
	}
	_, err := connect(t, "store").Exec(ctx, "CREATE TABLE only_here (x int)")
	if err == nil || !strings.Contains(err.Error(), "customer-shard-2") || sqlstate(err) != "42P07" {
		t.Errorf("DDL failing on one shard: %v", err)
	}
}

// INSERT without a column list into a sharded table routes by the
// table's column order, which the router reads from the catalog.
func TestInsertWithoutColumnList(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	conn.Exec(ctx, "DELETE FROM customers WHERE customer_id IN (42, 1)")
	if _, err := conn.Exec(ctx, "INSERT INTO customers VALUES (42, 'no list'), (42 + 0, 'x') ON CONFLICT DO NOTHING", pgx.QueryExecModeSimpleProtocol); err == nil {
		t.Fatal("an expression as the shard key was accepted")
	}
	if _, err := conn.Exec(ctx, "INSERT INTO customers VALUES (42, 'no list')", pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "INSERT INTO customers VALUES ($1, $2)", int64(1), "no list either"); err != nil {
		t.Fatal(err)
	}
	// Seed 002: 42 lives on customer-shard-1, 1 on customer-shard-2.
	for shard, id := range map[string]int64{"customer-shard-1": 42, "customer-shard-2": 1} {
		var name string
		if err := direct(t, shard, "store").QueryRow(ctx, "SELECT name FROM customers WHERE customer_id = $1", id).Scan(&name); err != nil {
			t.Errorf("customer %d on %s: %v", id, shard, err)
		}
	}
}

// pgx's describe-exec mode parses and describes the unnamed statement in
// one batch (sent to the authoritative shard) and binds it in the next,
// which goes where the row lives: the Bind must find the statement there,
// and never another session's unnamed statement left on a pooled backend.
func TestUnnamedStatementBoundInALaterBatch(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	conn.Exec(ctx, "DELETE FROM customers WHERE customer_id IN (1, 42)")
	for _, id := range []int64{1, 42} { // customer-shard-2, then customer-shard-1
		if _, err := conn.Exec(ctx, "INSERT INTO customers (customer_id, name) VALUES ($1, $2)", pgx.QueryExecModeDescribeExec, id, "described"); err != nil {
			t.Fatalf("describe-exec INSERT of %d: %v", id, err)
		}
		var name string
		if err := conn.QueryRow(ctx, "SELECT name FROM customers WHERE customer_id = $1", pgx.QueryExecModeDescribeExec, id).Scan(&name); err != nil || name != "described" {
			t.Fatalf("describe-exec SELECT of %d: %q, %v", id, name, err)
		}
	}
}

// A SELECT of counts over several shards answers the sum of the shards'
// counts, as one Postgres holding every row would, in text and binary.
func TestCountsAcrossShards(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	conn.Exec(ctx, "DELETE FROM customers WHERE customer_id BETWEEN 770000 AND 770099")
	for id := int64(770000); id < 770040; id++ {
		name := "even"
		if id%2 == 1 {
			name = "odd"
		}
		if _, err := conn.Exec(ctx, "INSERT INTO customers (customer_id, name) VALUES ($1, $2)", id, name); err != nil {
			t.Fatal(err)
		}
	}
	// What the shards hold, asked directly.
	var want [3]int64
	perShard := 0
	for _, shard := range []string{"customer-shard-1", "customer-shard-2"} {
		var all, odd, named int64
		err := direct(t, shard, "store").QueryRow(ctx, `SELECT count(*), count(*) FILTER (WHERE name = 'odd'), count(name)
			FROM customers WHERE customer_id BETWEEN 770000 AND 770099`).Scan(&all, &odd, &named)
		if err != nil {
			t.Fatal(err)
		}
		if all > 0 {
			perShard++
		}
		want[0], want[1], want[2] = want[0]+all, want[1]+odd, want[2]+named
	}
	if perShard != 2 || want[0] != 40 || want[1] != 20 {
		t.Fatalf("the test rows are not spread over both shards: %v on %d shards", want, perShard)
	}
	sql := `SELECT count(*), count(*) FILTER (WHERE name = 'odd') AS odd, count(name) FROM customers WHERE customer_id BETWEEN 770000 AND 770099`
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		var got [3]int64
		if err := conn.QueryRow(ctx, sql, mode).Scan(&got[0], &got[1], &got[2]); err != nil || got != want {
			t.Errorf("%v: counts %v, %v; want %v", mode, got, err, want)
		}
	}
	// An IN list reaching both shards sums too; counting distinct values
	// groups by them on each shard (as many as DISTINCT finds); counting
	// distinct expressions cannot, and says so.
	var n int64
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM customers WHERE customer_id IN (770001, 770002, 770003, 9999999)").Scan(&n); err != nil || n != 3 {
		t.Errorf("count over an IN list: %d, %v; want 3", n, err)
	}
	const mine = " FROM customers WHERE customer_id BETWEEN 770000 AND 770099"
	rows, err := conn.Query(ctx, "SELECT DISTINCT name"+mine+" AND name IS NOT NULL")
	if err != nil {
		t.Fatal(err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil || len(names) != 2 {
		t.Fatalf("DISTINCT name: %v, %v; want even and odd", names, err)
	}
	// Both names are on both shards: counted once each.
	if err := conn.QueryRow(ctx, "SELECT count(DISTINCT name)"+mine).Scan(&n); err != nil || n != 2 {
		t.Errorf("count(DISTINCT name) across shards: %d, %v; want 2", n, err)
	}
	if _, err := withoutGather(t, conn, "SELECT count(DISTINCT lower(name))"+mine); sqlstate(err) != "0A000" {
		t.Errorf("count(DISTINCT lower(name)) across shards: %v, want 0A000", err)
	}
	conn.Exec(ctx, "DELETE FROM customers WHERE customer_id BETWEEN 770000 AND 770099")
}

// A LIMIT without ORDER BY over several shards answers at most n rows,
// any n, as Postgres may, with an OFFSET too; ORDER BY a text column is
// refused.
func TestLimitAcrossShards(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	conn.Exec(ctx, "DELETE FROM customers WHERE customer_id BETWEEN 660000 AND 660099")
	for id := int64(660000); id < 660020; id++ {
		if _, err := conn.Exec(ctx, "INSERT INTO customers (customer_id, name) VALUES ($1, 'limit')", id); err != nil {
			t.Fatal(err)
		}
	}
	defer conn.Exec(ctx, "DELETE FROM customers WHERE customer_id BETWEEN 660000 AND 660099")
	where := " FROM customers WHERE name = 'limit' AND customer_id BETWEEN 660000 AND 660099"
	check := func(what string, want int, sql string, args ...any) {
		t.Helper()
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		seen := map[int64]bool{}
		for _, id := range ids {
			if id < 660000 || id >= 660020 || seen[id] {
				t.Fatalf("%s: row %d is not one of the rows, or twice", what, id)
			}
			seen[id] = true
		}
		if len(ids) != want {
			t.Errorf("%s: %d rows, want %d", what, len(ids), want)
		}
		if tag := rows.CommandTag().String(); tag != fmt.Sprintf("SELECT %d", want) {
			t.Errorf("%s: tag %q, want SELECT %d", what, tag, want)
		}
	}
	check("LIMIT 5 (simple)", 5, "SELECT customer_id"+where+" LIMIT 5", pgx.QueryExecModeSimpleProtocol)
	check("LIMIT 5 (extended)", 5, "SELECT customer_id"+where+" LIMIT 5")
	check("LIMIT 50", 20, "SELECT customer_id"+where+" LIMIT 50", pgx.QueryExecModeSimpleProtocol)
	check("LIMIT $1 = 3", 3, "SELECT customer_id"+where+" LIMIT $1", int64(3))
	check("LIMIT $1 = 7, cached", 7, "SELECT customer_id"+where+" LIMIT $1", int64(7))
	check("FETCH FIRST 2", 2, "SELECT customer_id"+where+" FETCH FIRST 2 ROWS ONLY", pgx.QueryExecModeSimpleProtocol)
	check("LIMIT 0", 0, "SELECT customer_id"+where+" LIMIT 0", pgx.QueryExecModeSimpleProtocol)
	check("LIMIT NULL", 20, "SELECT customer_id"+where+" LIMIT $1", nil)
	// An OFFSET: the shards run LIMIT 6, the router skips one row; in
	// the extended protocol the client's Bind binds that statement.
	check("LIMIT 5 OFFSET 1", 5, "SELECT customer_id"+where+" LIMIT 5 OFFSET 1", pgx.QueryExecModeSimpleProtocol)
	check("LIMIT 5 OFFSET 1 (extended)", 5, "SELECT customer_id"+where+" AND customer_id > $1 LIMIT 5 OFFSET 1", int64(0))
	check("LIMIT 5 OFFSET 18 (extended)", 2, "SELECT customer_id"+where+" AND customer_id > $1 LIMIT 5 OFFSET 18", int64(0))
	if _, err := withoutGather(t, conn, "SELECT customer_id"+where+" ORDER BY lower(name) LIMIT 5"); sqlstate(err) != "0A000" {
		t.Errorf("ORDER BY lower(name) LIMIT 5: %v, want 0A000", err)
	}
	if _, err := conn.Exec(ctx, "SELECT customer_id"+where+" LIMIT $1", int64(-1)); sqlstate(err) != "2201W" {
		t.Errorf("a negative LIMIT: %v, want 2201W as Postgres says", err)
	}
}

// Savepoints in a transaction over several shards, in both protocols:
// SAVEPOINT, ROLLBACK TO and RELEASE run on every shard of the
// transaction, and ROLLBACK TO recovers it from an error.
func TestSavepointsAcrossShards(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
		conn.Exec(ctx, "DELETE FROM customers WHERE customer_id BETWEEN 550000 AND 550099")
		tx, err := conn.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		exec := func(sql string, args ...any) error {
			if mode != pgx.QueryExecModeSimpleProtocol && len(args) == 0 {
				// pgx sends statements without arguments as simple
				// queries; force Parse/Bind/Execute.
				return tx.Conn().PgConn().ExecParams(ctx, sql, nil, nil, nil, nil).Read().Err
			}
			_, err := tx.Exec(ctx, sql, append([]any{mode}, args...)...)
			return err
		}
		// Rows on both shards, then a savepoint, more rows, an error.
		for i := int64(550000); i < 550010; i++ {
			if err := exec("INSERT INTO customers (customer_id, name) VALUES ($1, 'kept')", i); err != nil {
				t.Fatalf("%v: %v", mode, err)
			}
		}
		if err := exec("SAVEPOINT s1"); err != nil {
			t.Fatalf("%v: SAVEPOINT: %v", mode, err)
		}
		for i := int64(550010); i < 550020; i++ {
			if err := exec("INSERT INTO customers (customer_id, name) VALUES ($1, 'undone')", i); err != nil {
				t.Fatalf("%v: %v", mode, err)
			}
		}
		if err := exec("INSERT INTO customers (customer_id, name) VALUES ($1, 'dup')", int64(550000)); sqlstate(err) != "23505" {
			t.Fatalf("%v: duplicate: %v", mode, err)
		}
		if err := exec("ROLLBACK TO SAVEPOINT s1"); err != nil {
			t.Fatalf("%v: ROLLBACK TO: %v", mode, err)
		}
		if err := exec("RELEASE SAVEPOINT s1"); err != nil {
			t.Fatalf("%v: RELEASE: %v", mode, err)
		}
		if err := tx.Commit(ctx); err != nil {
			t.Fatalf("%v: COMMIT: %v", mode, err)
		}
		var kept, undone int
		if err := conn.QueryRow(ctx, "SELECT count(*) FILTER (WHERE name = 'kept'), count(*) FILTER (WHERE name = 'undone') FROM customers WHERE customer_id BETWEEN 550000 AND 550099").Scan(&kept, &undone); err != nil || kept != 10 || undone != 0 {
			t.Fatalf("%v: after ROLLBACK TO and COMMIT: %d kept, %d undone, %v; want 10 and 0", mode, kept, undone, err)
		}
	}
	conn.Exec(ctx, "DELETE FROM customers WHERE customer_id BETWEEN 550000 AND 550099")
}

// ORDER BY an integer column with a LIMIT over several shards answers
// what one Postgres would: the first n rows in order.
func TestOrderByLimitAcrossShards(t *testing.T) {
	ctx := context.Background()
	conn := connect(t, "store")
	if _, err := conn.Exec(ctx, "CREATE TABLE IF NOT EXISTS customers (customer_id bigint PRIMARY KEY, name text NOT NULL)"); err != nil {
		t.Fatal(err)
	}
	conn.Exec(ctx, "DELETE FROM customers WHERE customer_id BETWEEN 440000 AND 440099")
	defer conn.Exec(ctx, "DELETE FROM customers WHERE customer_id BETWEEN 440000 AND 440099")
	var all []int64
	for id := int64(440000); id < 440030; id++ {
		if _, err := conn.Exec(ctx, "INSERT INTO customers (customer_id, name) VALUES ($1, 'ordered')", id); err != nil {
			t.Fatal(err)
		}
		all = append(all, id)
	}
	onShards := map[string]int{}
	for _, shard := range []string{"customer-shard-1", "customer-shard-2"} {
		var n int
		direct(t, shard, "store").QueryRow(ctx, "SELECT count(*) FROM customers WHERE customer_id BETWEEN 440000 AND 440099").Scan(&n)
		onShards[shard] = n
	}
	if onShards["customer-shard-1"] == 0 || onShards["customer-shard-2"] == 0 {
		t.Fatalf("the rows are not on both shards: %v", onShards)
	}
	where := " FROM customers WHERE name = 'ordered' AND customer_id BETWEEN 440000 AND 440099"
	check := func(what string, want []int64, sql string, args ...any) {
		t.Helper()
		rows, err := conn.Query(ctx, sql, args...)
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		got, err := pgx.CollectRows(rows, pgx.RowTo[int64])
		if err != nil || !slices.Equal(got, want) {
			t.Fatalf("%s: %v, %v; want %v", what, got, err, want)
		}
		if tag := rows.CommandTag().String(); tag != fmt.Sprintf("SELECT %d", len(want)) {
			t.Errorf("%s: tag %q", what, tag)
		}
	}
	desc := slices.Clone(all)
	slices.Reverse(desc)
	for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeExec} {
		name := fmt.Sprint(mode)
		check(name+" ASC", all[:7], "SELECT customer_id"+where+" ORDER BY customer_id LIMIT 7", mode)
		check(name+" DESC", desc[:5], "SELECT customer_id"+where+" ORDER BY customer_id DESC LIMIT 5", mode)
		check(name+" by position", all[:3], "SELECT customer_id"+where+" ORDER BY 1 LIMIT 3", mode)
		check(name+" all", all, "SELECT customer_id"+where+" ORDER BY customer_id LIMIT 100", mode)
		check(name+" none", nil, "SELECT customer_id"+where+" ORDER BY customer_id LIMIT 0", mode)
	}
	// Text under the database's C collation orders by its bytes (every
	// name is equal here: the ids decide); an expression is refused.
	check("ORDER BY name, customer_id", all[:5], "SELECT customer_id"+where+" ORDER BY name, customer_id LIMIT 5")
	if _, err := withoutGather(t, conn, "SELECT customer_id"+where+" ORDER BY upper(name) LIMIT 5"); sqlstate(err) != "0A000" {
		t.Errorf("ORDER BY an expression of text across shards: %v, want 0A000", err)
	}
}

// TestLargeAnswersArriveWhole: an answer of many chunks (the sidecar
// sends at most 32 KiB at a time) reaches the client byte for byte, in
// both protocols, whether the router calls the sidecar in its process
// (the dev cluster's) or goes by its socket (another router's).
func TestLargeAnswersArriveWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	overSockets, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@%s/postgres?sslmode=disable", startRouter(t, router.BufferConfig{})))
	if err != nil {
		t.Fatal(err)
	}
	defer overSockets.Close(ctx)
	const q = "SELECT g, md5(g::text) FROM generate_series(1, 30000) g"
	for name, conn := range map[string]*pgx.Conn{"in-process": connect(t, "postgres"), "over sockets": overSockets} {
		for _, mode := range []pgx.QueryExecMode{pgx.QueryExecModeSimpleProtocol, pgx.QueryExecModeCacheStatement} {
			rows, err := conn.Query(ctx, q, mode)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for rows.Next() {
				var g int
				var sum string
				if err := rows.Scan(&g, &sum); err != nil {
					t.Fatal(err)
				}
				n++
				if want := fmt.Sprintf("%x", md5.Sum([]byte(strconv.Itoa(g)))); g != n || sum != want {
					t.Fatalf("%s, %v: row %d is (%d, %s), want (%d, %s)", name, mode, n, g, sum, n, want)
				}
			}
			if err := rows.Err(); err != nil || n != 30000 {
				t.Fatalf("%s, %v: %d rows, %v", name, mode, n, err)
			}
		}
	}
}

// A database created through the router takes logins at once, even right
// after a failed login made the role cache refresh (unknown names refresh
// it at most once a second).
func TestDatabaseCreatedThroughTheRouterTakesLoginsAtOnce(t *testing.T) {
	ctx := context.Background()
	addr := cluster.Info().Router
	admin := connect(t, "postgres")
	admin.Exec(ctx, "DROP DATABASE IF EXISTS fresh_db")
	t.Cleanup(func() { admin.Exec(context.Background(), "DROP DATABASE IF EXISTS fresh_db") })
	dsn := fmt.Sprintf("postgres://postgres:postgres@%s/fresh_db?sslmode=disable", addr)
	if _, err := pgx.Connect(ctx, dsn); sqlstate(err) != "3D000" {
		t.Fatalf("before CREATE DATABASE: %v, want SQLSTATE 3D000", err)
	}
	if _, err := admin.Exec(ctx, "CREATE DATABASE fresh_db"); err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("right after CREATE DATABASE: %v", err)
	}
	conn.Close(ctx)
}
