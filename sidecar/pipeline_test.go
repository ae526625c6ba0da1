package sidecar_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// autocommit runs sql as an autocommit batch, which the sidecar may
// pipeline on a shared connection.
func autocommit(t *testing.T, s *sidecar.ClientSession, sql string) answer {
	t.Helper()
	return run(t, s, &pb.Batch{Mode: pb.Mode_STATEMENT, Autocommit: true, Frontend: encode(t, &pgproto3.Query{String: sql})})
}

// pipelinePool shares one connection and never counts a statement slow
// or stuck, so that what a test sends concurrently queues on that
// connection and stays there.
func pipelinePool() sidecar.PoolConfig {
	cfg := sidecar.DefaultPoolConfig
	cfg.PipelineConns = 1
	cfg.PipelineSlowStatement = time.Minute
	cfg.PipelineStuckStatement = time.Minute
	return cfg
}

// sharing starts a sidecar named id with pipelinePool and opens an
// in-process session on it per cancel token ("" for none); the first
// session's first autocommit batch leaves the connection it ran on
// idle, to be shared by the next one.
func sharing(t *testing.T, id string, tokens ...string) (*sidecar.Server, []*sidecar.ClientSession) {
	t.Helper()
	srv := startSidecarAs(t, shared, id, pipelinePool())
	var ss []*sidecar.ClientSession
	for _, token := range tokens {
		ss = append(ss, openInProcess(t, srv, id, token))
	}
	autocommit(t, ss[0], "SELECT 1")
	return srv, ss
}

// TestPipelinedSessionsShareAConnection: sessions running autocommit
// statements at once share the pipelined connection, and each gets its
// own answers, its own errors and nothing of another's, on the gRPC
// stream, the framed port and in-process alike.
func TestPipelinedSessionsShareAConnection(t *testing.T) {
	t.Parallel()
	srv := startSidecarAs(t, shared, "pipelined-a", pipelinePool())
	c := dial(t, srv)
	const sessions, rounds = 8, 60
	var mu sync.Mutex
	perPid := map[string]int{}
	var wg sync.WaitGroup
	for i := 0; i < sessions; i++ {
		var s *sidecar.ClientSession
		switch i % 3 {
		case 0:
			s = open(t, c)
		case 1:
			s = openInProcess(t, srv, "pipelined-a", "")
		default:
			fs, _, err := sidecar.DialLocalSession(context.Background(), srv.SessionSocket(), "127.0.0.1:1",
				sidecar.DialOptions{Secret: secret}, "postgres", "postgres", "")
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { fs.Close() })
			s = fs
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				want := fmt.Sprintf("%d-%d", i, r)
				if r%5 == 4 {
					// An error ends only its own batch.
					a := autocommit(t, s, "SELECT 1/0")
					if len(a.errors) != 1 || a.errors[0] != "22012" || len(a.rows) != 0 {
						t.Errorf("session %d: division by zero answered %v", i, a)
						return
					}
					continue
				}
				a := autocommit(t, s, "SELECT pg_backend_pid()::text, '"+want+"'")
				if len(a.rows) != 1 || len(a.errors) != 0 || a.rows[0][1] != want || a.result.TxStatus != pb.TxStatus_IDLE {
					t.Errorf("session %d round %d: got %v, want the row %q", i, r, a, want)
					return
				}
				mu.Lock()
				perPid[a.rows[0][0]]++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	// Without pipelining, eight sessions at once spread over eight
	// connections; with it, most statements run on the shared one.
	most, total := 0, 0
	for _, n := range perPid {
		most, total = max(most, n), total+n
	}
	if most*2 < total {
		t.Errorf("statements per backend %v: none ran most of them, so none was shared", perPid)
	}
}

// TestPipelinedStatementThatOpensATransaction: a batch the router sent as
// autocommit that leaves a transaction open (which it must never do) is
// rolled back and fails, and the session goes on.
func TestPipelinedStatementThatOpensATransaction(t *testing.T) {
	t.Parallel()
	_, ss := sharing(t, "pipelined-b", "")
	s := ss[0]
	query(t, s, pb.Mode_STATEMENT, "CREATE TABLE IF NOT EXISTS pipelined_tx (v int)")
	a := autocommit(t, s, "BEGIN; INSERT INTO pipelined_tx VALUES (1)")
	if len(a.errors) != 1 || a.errors[0] != "0A000" || a.result.TxStatus != pb.TxStatus_IDLE {
		t.Fatalf("a transaction left open on a shared connection: %v", a)
	}
	if got := autocommit(t, s, "SELECT count(*) FROM pipelined_tx").one(t); got != "0" {
		t.Fatalf("the insert of the abandoned transaction is visible: %s rows", got)
	}
}

// TestPipelinedCancel: a cancel for a statement queued behind another
// session's waits until its statement runs and spares the one before it;
// a cancel that lands on the next session's statement, because the one
// it was for had just finished, costs that session nothing: its
// statement runs again.
func TestPipelinedCancel(t *testing.T) {
	t.Parallel()
	srv, ss := sharing(t, "pipelined-c", "cancel-a", "cancel-b")
	c := dial(t, srv)
	a, b := ss[0], ss[1]

	// b's long statement queues behind a's short one and is canceled
	// while it waits; a's finishes untouched.
	done := make(chan answer, 1)
	go func() { done <- autocommit(t, a, "SELECT pg_sleep(0.5), 'a'") }()
	time.Sleep(100 * time.Millisecond)
	go func() {
		time.Sleep(100 * time.Millisecond)
		c.Cancel(context.Background(), &pb.CancelRequest{CancelToken: "cancel-b"})
	}()
	start := time.Now()
	gotB := autocommit(t, b, "SELECT pg_sleep(20), 'b'")
	gotA := <-done
	if len(gotA.errors) != 0 || len(gotA.rows) != 1 || gotA.rows[0][1] != "a" {
		t.Fatalf("the statement ahead of a canceled one: %v", gotA)
	}
	if len(gotB.errors) != 1 || gotB.errors[0] != "57014" || time.Since(start) > 10*time.Second {
		t.Fatalf("the canceled queued statement: %v after %s", gotB, time.Since(start))
	}

	// a's cancel, asked while a waits behind x, goes when a heads the
	// queue; by then Postgres has run a (SELECT 1 takes microseconds)
	// and runs b's statement, which the cancel hits: b runs again.
	x := make(chan answer, 1)
	go func() { x <- autocommit(t, b, "SELECT pg_sleep(0.3), 'x'") }()
	time.Sleep(50 * time.Millisecond)
	aDone := make(chan answer, 1)
	go func() { aDone <- autocommit(t, a, "SELECT 'a'") }()
	time.Sleep(50 * time.Millisecond)
	c.Cancel(context.Background(), &pb.CancelRequest{CancelToken: "cancel-a"})
	bb := openInProcess(t, srv, "pipelined-c", "cancel-bb")
	gotBB := autocommit(t, bb, "SELECT pg_sleep(0.5), 'bb'")
	if got := <-x; len(got.errors) != 0 || got.rows[0][1] != "x" {
		t.Fatalf("the statement ahead: %v", got)
	}
	if got := <-aDone; len(got.errors) != 0 || got.rows[0][0] != "a" {
		t.Fatalf("the statement whose cancel came too late: %v", got)
	}
	if len(gotBB.errors) != 0 || len(gotBB.rows) != 1 || gotBB.rows[0][1] != "bb" {
		t.Fatalf("a statement canceled for another session: %v", gotBB)
	}
}

// TestPipelinedCancelStormHitsNoBystander: sessions canceled again and
// again share connections with sessions never canceled, which never see
// 57014.
func TestPipelinedCancelStormHitsNoBystander(t *testing.T) {
	t.Parallel()
	cfg := sidecar.DefaultPoolConfig
	cfg.PipelineConns = 2
	cfg.PipelineSlowStatement = time.Minute
	cfg.PipelineStuckStatement = time.Minute
	srv := startSidecarAs(t, shared, "pipelined-storm", cfg)
	c := dial(t, srv)
	deadline := time.Now().Add(2 * time.Second)
	var wg sync.WaitGroup
	var bystanderRuns int
	var mu sync.Mutex
	for i := 0; i < 6; i++ {
		token := fmt.Sprintf("storm-%d", i)
		s := openInProcess(t, srv, "pipelined-storm", token)
		target := i < 3
		wg.Add(1)
		go func() {
			defer wg.Done()
			if target {
				stop := make(chan struct{})
				defer close(stop)
				go func() {
					for {
						select {
						case <-stop:
							return
						case <-time.After(3 * time.Millisecond):
							c.Cancel(context.Background(), &pb.CancelRequest{CancelToken: token})
						}
					}
				}()
			}
			for time.Now().Before(deadline) {
				a := autocommit(t, s, "SELECT pg_sleep(0.002), 'ok'")
				if target {
					continue // canceled or not
				}
				if len(a.errors) != 0 || len(a.rows) != 1 || a.rows[0][1] != "ok" {
					t.Errorf("a session never canceled got %v", a)
					return
				}
				mu.Lock()
				bystanderRuns++
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	if bystanderRuns < 100 {
		t.Errorf("only %d statements of sessions never canceled ran", bystanderRuns)
	}
}

// TestPipelinedSlowReceiverDelaysNoOne: a session whose router does not
// take its answer holds up no one queued behind it.
func TestPipelinedSlowReceiverDelaysNoOne(t *testing.T) {
	t.Parallel()
	_, ss := sharing(t, "pipelined-slow", "", "")
	a, b := ss[0], ss[1]
	release, held := make(chan struct{}), make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		_, err := a.Run(&pb.Batch{Mode: pb.Mode_STATEMENT, Autocommit: true, Frontend: encode(t, &pgproto3.Query{String: "SELECT pg_sleep(0.1), 'a'"})},
			func([]byte) error { close(held); <-release; return nil })
		aDone <- err
	}()
	time.Sleep(20 * time.Millisecond) // b queues behind a's statement
	start := time.Now()
	got := autocommit(t, b, "SELECT 'b'")
	waited := time.Since(start)
	<-held
	close(release)
	if err := <-aDone; err != nil {
		t.Fatal(err)
	}
	if got.one(t) != "b" || waited > 5*time.Second {
		t.Fatalf("behind a receiver that takes nothing: %v after %s", got, waited)
	}
}

// TestPipelinedLargeAnswersAndBatches: an answer too large to hold runs
// again on a connection of its own and arrives whole, as does a batch
// too large to pipeline, while others keep sharing.
func TestPipelinedLargeAnswersAndBatches(t *testing.T) {
	t.Parallel()
	_, ss := sharing(t, "pipelined-large", "", "")
	s, other := ss[0], ss[1]
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := 0; i < 50; i++ {
			if got := autocommit(t, other, fmt.Sprintf("SELECT %d", i)).one(t); got != fmt.Sprint(i) {
				t.Errorf("beside large answers: %s, want %d", got, i)
				return
			}
		}
	}()
	for i := 0; i < 3; i++ {
		a := autocommit(t, s, "SELECT g, repeat('x', 1000) FROM generate_series(1, 1000) g")
		if len(a.errors) != 0 || len(a.rows) != 1000 || a.rows[999][0] != "1000" || len(a.rows[999][1]) != 1000 {
			t.Fatalf("a large answer: %d rows, errors %v", len(a.rows), a.errors)
		}
		long := strings.Repeat("y", 8000)
		if got := autocommit(t, s, "SELECT length('"+long+"')").one(t); got != "8000" {
			t.Fatalf("a large batch: %s", got)
		}
	}
	<-done
}

// TestPipelinedFailedParseIsForgotten: a statement prepared in front of a
// pipelined batch whose Parse fails is not taken as prepared on that
// connection: once it can be prepared, the next batch prepares it.
func TestPipelinedFailedParseIsForgotten(t *testing.T) {
	t.Parallel()
	_, ss := sharing(t, "pipelined-d", "")
	s := ss[0]
	query(t, s, pb.Mode_STATEMENT, "DROP TABLE IF EXISTS pipelined_later")
	stmt := &pb.PreparedStatement{Name: "pipelined_later_read", Query: "SELECT v FROM pipelined_later"}
	lookup := &pb.Batch{Mode: pb.Mode_STATEMENT, Autocommit: true, Prepared: []*pb.PreparedStatement{stmt},
		Frontend: encode(t, &pgproto3.Bind{PreparedStatement: stmt.Name}, &pgproto3.Execute{}, &pgproto3.Sync{})}
	if a := run(t, s, lookup); len(a.errors) != 1 || a.errors[0] != "42P01" {
		t.Fatalf("a statement on a missing table: %v", a)
	}
	query(t, s, pb.Mode_STATEMENT, "CREATE TABLE pipelined_later (v int); INSERT INTO pipelined_later VALUES (7)")
	if a := run(t, s, lookup); len(a.errors) != 0 || len(a.rows) != 1 || a.rows[0][0] != "7" {
		t.Fatalf("the statement once its table exists: %v", a)
	}
}

// TestPipelinedStuckStatementReleasesTheQueue: a plain read blocked on a
// lock at the head of a shared connection holds the batches queued
// behind it for about PipelineStuckStatement only: the connection is
// broken off and they run again on connections of their own. Here the
// lock's holder commits only once the read queued behind the blocked one
// has answered, so without the break the three would wait on each other
// for ever, a deadlock Postgres cannot see. A batch whose session
// canceled it while it was queued is answered 57014 rather than run
// again where the cancel would not follow.
func TestPipelinedStuckStatementReleasesTheQueue(t *testing.T) {
	t.Parallel()
	cfg := pipelinePool()
	cfg.PipelineStuckStatement = 400 * time.Millisecond
	srv := startSidecarAs(t, shared, "pipelined-stuck", cfg)
	c := dial(t, srv)
	open := func(token string) *sidecar.ClientSession { return openInProcess(t, srv, "pipelined-stuck", token) }
	locker, blocked, bystander, blocked2, canceler := open(""), open(""), open(""), open(""), open("stuck-canceler")
	query(t, locker, pb.Mode_STATEMENT, "CREATE TABLE IF NOT EXISTS pipelined_stuck (v int)")
	if a := query(t, locker, pb.Mode_TRANSACTION, "BEGIN; LOCK TABLE pipelined_stuck IN ACCESS EXCLUSIVE MODE"); len(a.errors) != 0 {
		t.Fatalf("taking the lock: %v", a)
	}
	committed := false
	commit := func() {
		if !committed {
			committed = true
			query(t, locker, pb.Mode_TRANSACTION, "COMMIT")
		}
	}
	defer commit()
	waiting := func(n int) func() bool {
		return func() bool {
			return query(t, locker, pb.Mode_TRANSACTION,
				"SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = 'pipelined_stuck'::regclass").one(t) == fmt.Sprint(n)
		}
	}
	count := "SELECT count(*) FROM pipelined_stuck"

	autocommit(t, blocked, "SELECT 1") // leaves its connection idle, to be shared next
	blockedDone := make(chan answer, 1)
	go func() { blockedDone <- autocommit(t, blocked, count) }()
	eventually(t, "the read waiting on the lock", waiting(1))
	bystanderDone := make(chan answer, 1)
	go func() { bystanderDone <- autocommit(t, bystander, "SELECT 'bystander'") }()
	select {
	case a := <-bystanderDone:
		if len(a.errors) != 0 || a.one(t) != "bystander" {
			t.Fatalf("the read queued behind the blocked one: %v", a)
		}
	case <-time.After(5 * time.Second):
		commit() // ends the wait, so that the test ends
		t.Fatal("the read queued behind the blocked one waited 5 s")
	}

	// Again, with a batch canceled while it waits behind the blocked one.
	autocommit(t, blocked2, "SELECT 1")
	blocked2Done := make(chan answer, 1)
	go func() { blocked2Done <- autocommit(t, blocked2, count) }()
	eventually(t, "two reads waiting on the lock", waiting(2))
	go func() {
		time.Sleep(100 * time.Millisecond) // queued, and well before the break
		c.Cancel(context.Background(), &pb.CancelRequest{CancelToken: "stuck-canceler"})
	}()
	start := time.Now()
	if a := autocommit(t, canceler, "SELECT pg_sleep(10), 'ran'"); len(a.errors) != 1 || a.errors[0] != "57014" || time.Since(start) > 5*time.Second {
		t.Fatalf("the batch canceled while queued: %v after %s", a, time.Since(start))
	}

	commit()
	for _, done := range []chan answer{blockedDone, blocked2Done} {
		if a := <-done; len(a.errors) != 0 || a.one(t) != "0" {
			t.Fatalf("a blocked read, once the lock is released: %v", a)
		}
	}
}
