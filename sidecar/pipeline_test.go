package sidecar_test

import (
	"context"
	"fmt"
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

// pipelinePool shares one connection and never counts a statement slow,
// so that what a test sends concurrently queues on that connection.
func pipelinePool() sidecar.PoolConfig {
	cfg := sidecar.DefaultPoolConfig
	cfg.PipelineConns = 1
	cfg.PipelineSlowStatement = time.Minute
	return cfg
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
	srv := startSidecarAs(t, shared, "pipelined-b", pipelinePool())
	s := openInProcess(t, srv, "pipelined-b", "")
	query(t, s, pb.Mode_STATEMENT, "CREATE TABLE IF NOT EXISTS pipelined_tx (v int)")
	autocommit(t, s, "SELECT 1") // the pipelined connection is shared from here on
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
	srv := startSidecarAs(t, shared, "pipelined-c", pipelinePool())
	c := dial(t, srv)
	a := openInProcess(t, srv, "pipelined-c", "cancel-a")
	b := openInProcess(t, srv, "pipelined-c", "cancel-b")
	autocommit(t, a, "SELECT 1") // shares the connection from here on

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

	// a's answer is held by its receiver while b's statement runs; a's
	// cancel, too late for a, reaches b's, which runs again.
	release := make(chan struct{})
	held := make(chan struct{})
	go func() {
		_, err := a.Run(&pb.Batch{Mode: pb.Mode_STATEMENT, Autocommit: true, Frontend: encode(t, &pgproto3.Query{String: "SELECT 'a'"})},
			func([]byte) error { close(held); <-release; return nil })
		if err != nil {
			t.Errorf("a: %v", err)
		}
	}()
	<-held
	go func() {
		time.Sleep(200 * time.Millisecond) // b's statement is running by now
		c.Cancel(context.Background(), &pb.CancelRequest{CancelToken: "cancel-a"})
		time.Sleep(100 * time.Millisecond)
		close(release)
	}()
	if got := autocommit(t, b, "SELECT pg_sleep(0.5), 'b'"); len(got.errors) != 0 || len(got.rows) != 1 || got.rows[0][1] != "b" {
		t.Fatalf("a statement canceled for another session: %v", got)
	}
}

// TestPipelinedFailedParseIsForgotten: a statement prepared in front of a
// pipelined batch whose Parse fails is not taken as prepared on that
// connection: once it can be prepared, the next batch prepares it.
func TestPipelinedFailedParseIsForgotten(t *testing.T) {
	t.Parallel()
	srv := startSidecarAs(t, shared, "pipelined-d", pipelinePool())
	s := openInProcess(t, srv, "pipelined-d", "")
	query(t, s, pb.Mode_STATEMENT, "DROP TABLE IF EXISTS pipelined_later")
	autocommit(t, s, "SELECT 1") // the pipelined connection is shared from here on
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
