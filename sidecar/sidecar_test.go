package sidecar_test

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

func TestRefusesCallersWithoutTheCredential(t *testing.T) {
	t.Parallel()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	for _, sec := range []string{"", "wrong-secret-0123456789"} {
		c, err := sidecar.Dial(srv.Addr(), sidecar.DialOptions{Secret: sec})
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_, err = c.Status(context.Background(), &pb.StatusRequest{})
		if status.Code(err) != codes.Unauthenticated {
			t.Errorf("secret %q: Status gave %v, want Unauthenticated", sec, err)
		}
		s, err := c.OpenSession(context.Background(), "postgres", "postgres")
		if err == nil {
			_, err = s.Run(&pb.Batch{Frontend: encode(t, &pgproto3.Query{String: "SELECT 1"})}, func([]byte) error { return nil })
		}
		if err == nil {
			t.Errorf("secret %q: a session ran a query", sec)
		}
	}
	// With the credential it works.
	if _, err := dial(t, srv).Status(context.Background(), &pb.StatusRequest{}); err != nil {
		t.Fatal(err)
	}
}

func TestPinningModes(t *testing.T) {
	t.Parallel()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	c := dial(t, srv)
	a, b := open(t, c), open(t, c)

	// A transaction keeps its backend across batches, whatever the mode.
	pidA := query(t, a, pb.Mode_STATEMENT, "BEGIN; SELECT pg_backend_pid()").one(t)
	if r := query(t, a, pb.Mode_STATEMENT, "SELECT pg_backend_pid()"); r.one(t) != pidA || r.result.TxStatus != pb.TxStatus_IN_TRANSACTION {
		t.Fatalf("transaction moved backends or lost its status: %v", r)
	}
	// Meanwhile another session cannot get that backend.
	if pidB := query(t, b, pb.Mode_STATEMENT, "SELECT pg_backend_pid()").one(t); pidB == pidA {
		t.Fatal("a backend pinned by a transaction served another session")
	}
	if r := query(t, a, pb.Mode_STATEMENT, "COMMIT"); r.result.TxStatus != pb.TxStatus_IDLE {
		t.Fatalf("commit: %v", r)
	}
	// After the transaction, the backend goes back to the pool: the most
	// recently returned one serves the next statement.
	if pid := query(t, b, pb.Mode_STATEMENT, "SELECT pg_backend_pid()").one(t); pid != pidA {
		t.Errorf("pool served %s, want the just-returned %s", pid, pidA)
	}

	// SESSION mode pins until the session ends; then the backend is reset.
	s := open(t, c)
	pidS := query(t, s, pb.Mode_SESSION, "DO $$ BEGIN PERFORM pg_advisory_lock(4242); END $$; CREATE TEMP TABLE scratch(x int); SET work_mem = '7MB'; LISTEN chan; PREPARE mine AS SELECT 1; SELECT pg_backend_pid()").one(t)
	if pid := query(t, s, pb.Mode_STATEMENT, "SELECT pg_backend_pid()").one(t); pid != pidS {
		t.Fatalf("session-pinned backend changed: %s then %s", pidS, pid)
	}
	if pid := query(t, b, pb.Mode_STATEMENT, "SELECT pg_backend_pid()").one(t); pid == pidS {
		t.Fatal("a session-pinned backend served another session")
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The reset backend is the most recently returned: check it is clean.
	r := query(t, b, pb.Mode_STATEMENT, `SELECT pg_backend_pid()::text || ' ' ||
	   (SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid())::text || ' ' ||
	   (SELECT count(*) FROM pg_class WHERE relname = 'scratch' AND relpersistence = 't')::text || ' ' ||
	   current_setting('work_mem') || ' ' || (SELECT count(*) FROM pg_listening_channels())::text || ' ' ||
	   (SELECT count(*) FROM pg_prepared_statements)::text`)
	if got, want := r.one(t), pidS+" 0 0 4MB 0 0"; got != want {
		t.Errorf("reused backend state %q, want %q (pid, advisory locks, temp tables, work_mem, listens, prepared statements)", got, want)
	}
}

func TestSettingsFollowTheSession(t *testing.T) {
	t.Parallel()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	c := dial(t, srv)
	show := encode(t, &pgproto3.Query{String: "SELECT current_setting('application_name') || '|' || current_setting('search_path')"})
	defaults := run(t, open(t, c), &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: show}).one(t)
	s := open(t, c)
	r := run(t, s, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: show, Settings: []*pb.Setting{
		{Name: "application_name", Value: "it's mine"}, {Name: "search_path", Value: `"Weird\Schema", public`}}})
	if got := r.one(t); got != `it's mine|"Weird\Schema", public` {
		t.Errorf("settings applied as %q", got)
	}
	// A session without settings gets a backend with server defaults, even
	// the same backend.
	if got := run(t, open(t, c), &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: show}).one(t); got != defaults {
		t.Errorf("defaults came back as %q", got)
	}
	r = run(t, s, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: show, Settings: []*pb.Setting{{Name: "no_such_setting", Value: "1"}}})
	if len(r.errors) != 1 || r.errors[0] != "42704" {
		t.Errorf("a bad setting gave %v, want SQLSTATE 42704", r)
	}
}

func TestPreparedStatementsFollowTheSessionAcrossBackends(t *testing.T) {
	t.Parallel()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	c := dial(t, srv)
	stmt := &pb.PreparedStatement{Name: "tsr_test_add", Query: "SELECT $1::int + 1", ParamOids: []uint32{23}}
	exec := func(s *sidecar.ClientSession, v string) answer {
		return run(t, s, &pb.Batch{Mode: pb.Mode_STATEMENT, Prepared: []*pb.PreparedStatement{stmt}, Frontend: encode(t,
			&pgproto3.Bind{PreparedStatement: stmt.Name, Parameters: [][]byte{[]byte(v)}},
			&pgproto3.Execute{},
			&pgproto3.Sync{})})
	}
	a := open(t, c)
	// First use prepares it on a backend; the injected Parse's
	// ParseComplete is not part of the answer.
	if r := exec(a, "41"); r.one(t) != "42" || r.types[0] != '2' {
		t.Fatalf("first execution: %v", r)
	}
	// Pin that backend in a transaction so the next session must use
	// another one, which has never seen the statement.
	pinned := query(t, a, pb.Mode_STATEMENT, "BEGIN; SELECT pg_backend_pid()").one(t)
	b := open(t, c)
	if pid := query(t, b, pb.Mode_STATEMENT, "SELECT pg_backend_pid()").one(t); pid == pinned {
		t.Fatal("test setup: both sessions on one backend")
	}
	if r := exec(b, "99"); r.one(t) != "100" || r.types[0] != '2' {
		t.Fatalf("execution on a second backend: %v", r)
	}
	// And again on the same backend: no second Parse (it would fail with
	// 42P05 duplicate_prepared_statement if the sidecar sent one).
	if r := exec(b, "1"); r.one(t) != "2" || len(r.errors) > 0 {
		t.Fatalf("second execution: %v", r)
	}
	query(t, a, pb.Mode_STATEMENT, "ROLLBACK")
}

// TestConnectionWithTooManyStatementsRetires: a connection that holds more
// than MaxConnStatements prepared statements closes when it comes back,
// and the next batch prepares what it needs on a fresh one.
func TestConnectionWithTooManyStatementsRetires(t *testing.T) {
	t.Parallel()
	cfg := sidecar.DefaultPoolConfig
	cfg.MaxConnStatements, cfg.PipelineConns = 2, 0
	srv := startSidecar(t, shared, cfg)
	s := open(t, dial(t, srv))
	pid := func(i int) string {
		stmt := &pb.PreparedStatement{Name: fmt.Sprintf("tsr_retire_%d", i), Query: fmt.Sprintf("SELECT pg_backend_pid()::text || ' %d'", i)}
		r := run(t, s, &pb.Batch{Mode: pb.Mode_STATEMENT, Prepared: []*pb.PreparedStatement{stmt}, Frontend: encode(t,
			&pgproto3.Bind{PreparedStatement: stmt.Name}, &pgproto3.Execute{}, &pgproto3.Sync{})})
		got, ok := strings.CutSuffix(r.one(t), fmt.Sprintf(" %d", i))
		if !ok {
			t.Fatalf("statement %d answered %v", i, r)
		}
		return got
	}
	first := pid(1)
	if p := pid(2); p != first {
		t.Fatalf("within the limit the connection changed: %s then %s", first, p)
	}
	if p := pid(3); p != first {
		t.Fatalf("the statement past the limit ran elsewhere: %s then %s", first, p)
	}
	if p := pid(1); p == first {
		t.Errorf("a connection holding 3 statements (limit 2) served again")
	}
}

func TestMaxWaitExceeded(t *testing.T) {
	t.Parallel()
	cfg := sidecar.DefaultPoolConfig
	cfg.Capacity, cfg.MaxWait = 1, 300*time.Millisecond
	srv := startSidecar(t, shared, cfg)
	c := dial(t, srv)
	a, b := open(t, c), open(t, c)
	query(t, a, pb.Mode_STATEMENT, "BEGIN")
	start := time.Now()
	r := query(t, b, pb.Mode_STATEMENT, "SELECT 1")
	if len(r.errors) != 1 || r.errors[0] != "53300" {
		t.Fatalf("want SQLSTATE 53300 while the only backend is pinned, got %v", r)
	}
	if waited := time.Since(start); waited < 250*time.Millisecond {
		t.Errorf("gave up after %s, before MaxWait", waited)
	}
	// Once the transaction ends, the waiting session gets the backend.
	done := make(chan answer, 1)
	go func() { done <- query(t, b, pb.Mode_STATEMENT, "SELECT 7") }()
	time.Sleep(50 * time.Millisecond)
	query(t, a, pb.Mode_STATEMENT, "COMMIT")
	if r := <-done; r.one(t) != "7" {
		t.Fatalf("waiter got %v", r)
	}
}

func TestBackendKilledUnderAClient(t *testing.T) {
	t.Parallel()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	c := dial(t, srv)
	a, killer := open(t, c), open(t, c)
	pid := query(t, a, pb.Mode_STATEMENT, "BEGIN; SELECT pg_backend_pid()").one(t)
	if r := query(t, killer, pb.Mode_STATEMENT, "SELECT pg_terminate_backend("+pid+")"); r.one(t) != "t" {
		t.Fatalf("terminate: %v", r)
	}
	r := query(t, a, pb.Mode_STATEMENT, "SELECT 1")
	if len(r.errors) == 0 || r.result.TxStatus != pb.TxStatus_IDLE {
		t.Fatalf("statement on a killed backend: %v, want an error and an idle session", r)
	}
	// The session goes on with a new backend, and others are unharmed.
	if got := query(t, a, pb.Mode_STATEMENT, "SELECT pg_backend_pid()").one(t); got == pid {
		t.Fatal("killed backend reused")
	}
	if got := query(t, killer, pb.Mode_STATEMENT, "SELECT 5").one(t); got != "5" {
		t.Fatal(got)
	}
}

func TestRouterVanishingMidTransactionRollsBack(t *testing.T) {
	t.Parallel()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	c := dial(t, srv)
	setup := open(t, c)
	query(t, setup, pb.Mode_STATEMENT, "CREATE TABLE IF NOT EXISTS vanish (id int)")
	ctx, cancel := context.WithCancel(context.Background())
	s, err := c.OpenSession(ctx, "postgres", "postgres")
	if err != nil {
		t.Fatal(err)
	}
	pid := query(t, s, pb.Mode_STATEMENT, "BEGIN; INSERT INTO vanish VALUES (1); SELECT pg_backend_pid()").one(t)
	cancel() // the router is gone, mid-transaction
	eventually(t, "the transaction to end", func() bool {
		r := query(t, setup, pb.Mode_STATEMENT, "SELECT count(*) FROM pg_stat_activity WHERE pid = "+pid+" AND state LIKE 'idle in transaction%'")
		return r.one(t) == "0"
	})
	if got := query(t, setup, pb.Mode_STATEMENT, "SELECT count(*) FROM vanish").one(t); got != "0" {
		t.Errorf("the vanished session's insert survived: %s rows", got)
	}
}

func TestMalformedBatchHarmsNoOne(t *testing.T) {
	t.Parallel()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	c := dial(t, srv)
	s := open(t, c)
	for _, bad := range [][]byte{
		{'Q', 0, 0, 0, 99, 'x'},                            // length beyond the batch
		{'Q', 0, 0, 0, 2},                                  // length below 4
		{'X', 0, 0, 0, 4},                                  // Terminate is the sidecar's business
		encode(t, &pgproto3.Flush{}),                       // a batch must end in Sync or Query
		encode(t, &pgproto3.CopyData{Data: []byte("1\n")}), // no COPY running
	} {
		r := run(t, s, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: bad})
		if len(r.errors) != 1 {
			t.Errorf("batch %q: %v", bad, r)
		}
	}
	if got := query(t, s, pb.Mode_STATEMENT, "SELECT 'still fine'").one(t); got != "still fine" {
		t.Fatal(got)
	}
}

func TestLargeResultsStreamInChunks(t *testing.T) {
	t.Parallel()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	s := open(t, dial(t, srv))
	r := query(t, s, pb.Mode_STATEMENT, "SELECT repeat('x', 100) FROM generate_series(1, 20000)")
	if len(r.rows) != 20000 || r.tags[0] != "SELECT 20000" {
		t.Fatalf("got %d rows, tag %v", len(r.rows), r.tags)
	}
	if r.chunks < 20 {
		t.Errorf("a 2 MB result came in %d chunks; it should stream", r.chunks)
	}
}

func TestCopyFromStdin(t *testing.T) {
	t.Parallel()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	s := open(t, dial(t, srv))
	// The table starts empty even when the test runs again (-count).
	query(t, s, pb.Mode_STATEMENT, "DROP TABLE IF EXISTS copied; CREATE TABLE copied (id int, name text)")
	r := query(t, s, pb.Mode_STATEMENT, "COPY copied FROM STDIN")
	if !r.result.CopyIn || r.types[len(r.types)-1] != 'G' {
		t.Fatalf("COPY did not wait for data: %v", r)
	}
	run(t, s, &pb.Batch{Frontend: encode(t, &pgproto3.CopyData{Data: []byte("1\tone\n")})})
	r = run(t, s, &pb.Batch{Frontend: encode(t, &pgproto3.CopyData{Data: []byte("2\ttwo\n")}, &pgproto3.CopyDone{})})
	if len(r.tags) != 1 || r.tags[0] != "COPY 2" {
		t.Fatalf("COPY ended with %v", r)
	}
	if got := query(t, s, pb.Mode_STATEMENT, "SELECT string_agg(name, ',' ORDER BY id) FROM copied").one(t); got != "one,two" {
		t.Errorf("copied %q", got)
	}
}

func TestIdleInTransactionTimeout(t *testing.T) {
	t.Parallel()
	cfg := sidecar.DefaultPoolConfig
	cfg.Capacity, cfg.IdleInTransactionTimeout = 1, 300*time.Millisecond
	srv := startSidecar(t, shared, cfg)
	c := dial(t, srv)
	a := open(t, c)
	query(t, a, pb.Mode_STATEMENT, "BEGIN")
	time.Sleep(700 * time.Millisecond)
	// The only backend was freed: another session gets it at once.
	if got := query(t, open(t, c), pb.Mode_STATEMENT, "SELECT 3").one(t); got != "3" {
		t.Fatal(got)
	}
	// The idle session learns on its next statement, as from Postgres.
	var raw []byte
	_, err := a.Run(&pb.Batch{Frontend: encode(t, &pgproto3.Query{String: "SELECT 1"})}, func(b []byte) error { raw = append(raw, b...); return nil })
	if err != nil || !strings.Contains(string(raw), "25P03") {
		t.Fatalf("after the timeout: err %v, answer %q", err, raw)
	}
	// And the session is over.
	if _, err := a.Run(&pb.Batch{Frontend: encode(t, &pgproto3.Query{String: "SELECT 1"})}, func([]byte) error { return nil }); err == nil {
		t.Fatal("the timed-out session ran another statement")
	}
}

func TestCancelInterruptsTheRunningStatement(t *testing.T) {
	t.Parallel()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	c := dial(t, srv)
	s, err := c.OpenCancelableSession(context.Background(), "postgres", "postgres", "token-123")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	go func() {
		time.Sleep(300 * time.Millisecond)
		c.Cancel(context.Background(), &pb.CancelRequest{CancelToken: "token-123"})
	}()
	start := time.Now()
	r := query(t, s, pb.Mode_STATEMENT, "SELECT pg_sleep(20)")
	if len(r.errors) != 1 || r.errors[0] != "57014" || time.Since(start) > 10*time.Second {
		t.Fatalf("canceled sleep: %v after %s", r, time.Since(start))
	}
	// A wrong token cancels nothing.
	if resp, err := c.Cancel(context.Background(), &pb.CancelRequest{CancelToken: "nope"}); err != nil || resp.Canceled {
		t.Fatalf("cancel with a wrong token: %v %v", resp, err)
	}
	if got := query(t, s, pb.Mode_STATEMENT, "SELECT 'after'").one(t); got != "after" {
		t.Fatal(got)
	}
}

// A pooled connection that died while idle (a restart, a fence) costs
// the next batch nothing: it goes out on a fresh connection.
func TestBatchResentWhenAnIdleBackendDied(t *testing.T) {
	t.Parallel()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	c := dial(t, srv)
	killer, a := open(t, c), open(t, c)
	query(t, killer, pb.Mode_SESSION, "SELECT 1").one(t) // pins its own backend
	pid := query(t, a, pb.Mode_STATEMENT, "SELECT pg_backend_pid()").one(t)
	if r := query(t, killer, pb.Mode_SESSION, "SELECT pg_terminate_backend("+pid+")"); r.one(t) != "t" {
		t.Fatalf("terminate: %v", r)
	}
	time.Sleep(200 * time.Millisecond) // the backend exits and closes its socket
	if got := query(t, a, pb.Mode_STATEMENT, "SELECT 2").one(t); got != "2" {
		t.Fatalf("batch after its idle backend died: %q, want 2", got)
	}
	if got := query(t, a, pb.Mode_STATEMENT, "SELECT pg_backend_pid()").one(t); got == pid {
		t.Fatal("the dead backend was reused")
	}
}

// A session-pinned backend's notifications reach a listening client while
// the session is idle, and the session's next batches answer normally;
// without Listen they come with the next answer.
func TestNotificationsWhileIdle(t *testing.T) {
	t.Parallel()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	c := dial(t, srv)
	listener, notifier := open(t, c), open(t, c)
	query(t, listener, pb.Mode_SESSION, "LISTEN idle_news")
	got := make(chan []byte, 4)
	listener.Listen(func(msgs []byte) { got <- append([]byte(nil), msgs...) })
	query(t, notifier, pb.Mode_STATEMENT, "NOTIFY idle_news, 'ping'")
	select {
	case msgs := <-got:
		if len(msgs) == 0 || msgs[0] != 'A' || !bytes.Contains(msgs, []byte("idle_news\x00ping\x00")) {
			t.Fatalf("async message %q, want a NotificationResponse for idle_news", msgs)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no notification while the session was idle")
	}
	for i := range 3 {
		if got := query(t, listener, pb.Mode_SESSION, fmt.Sprintf("SELECT %d", i)).one(t); got != fmt.Sprint(i) {
			t.Fatalf("batch %d after a notification: %q", i, got)
		}
	}

	// A session that does not listen gets the notification in its next
	// answer, before ReadyForQuery.
	plain := open(t, c)
	query(t, plain, pb.Mode_SESSION, "LISTEN plain_news")
	query(t, notifier, pb.Mode_STATEMENT, "NOTIFY plain_news, 'later'")
	time.Sleep(200 * time.Millisecond)
	var raw bytes.Buffer
	if _, err := plain.Run(&pb.Batch{Mode: pb.Mode_SESSION, Frontend: encode(t, &pgproto3.Query{String: "SELECT 1"})}, func(b []byte) error {
		raw.Write(b)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !bytes.Contains(raw.Bytes(), []byte("plain_news\x00later\x00")) {
		t.Fatalf("the answer after a notification does not carry it: %q", raw.Bytes())
	}
}

// TestBatchesReferToWhatTheSessionSent: a session sends its settings and
// prepared statements once and later batches refer to them; changed
// settings and more statements than a session remembers still arrive
// whole, and a reference to a statement never sent ends the session with
// 08P01.
func TestBatchesReferToWhatTheSessionSent(t *testing.T) {
	t.Parallel()
	srv := startSidecar(t, shared, sidecar.PoolConfig{})
	c := dial(t, srv)
	s := open(t, c)
	show := encode(t, &pgproto3.Query{String: "SELECT current_setting('application_name')"})
	for i, name := range []string{"first", "first", "second", "second", ""} {
		var settings []*pb.Setting
		if name != "" {
			settings = []*pb.Setting{{Name: "application_name", Value: name}}
		}
		if got := run(t, s, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: show, Settings: settings}).one(t); got != name {
			t.Errorf("batch %d: application_name %q, want %q", i, got, name)
		}
	}

	// More distinct statements than a session remembers, each used twice.
	for i := range 1100 {
		stmt := &pb.PreparedStatement{Name: fmt.Sprintf("tsr_ref_%d", i), Query: fmt.Sprintf("SELECT %d + $1::int", i), ParamOids: []uint32{23}}
		for range 2 {
			r := run(t, s, &pb.Batch{Mode: pb.Mode_STATEMENT, Prepared: []*pb.PreparedStatement{stmt}, Frontend: encode(t,
				&pgproto3.Bind{PreparedStatement: stmt.Name, Parameters: [][]byte{[]byte("1")}},
				&pgproto3.Execute{}, &pgproto3.Sync{})})
			if got, want := r.one(t), fmt.Sprint(i+1); got != want {
				t.Fatalf("statement %d: %s, want %s", i, got, want)
			}
		}
	}

	stream, err := c.Session(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_Open{Open: &pb.Open{Database: "postgres", User: "postgres"}}})
	stream.Send(&pb.SessionRequest{Msg: &pb.SessionRequest_Batch{Batch: &pb.Batch{Mode: pb.Mode_STATEMENT, PreparedNames: []string{"never_sent"},
		Frontend: encode(t, &pgproto3.Bind{PreparedStatement: "never_sent"}, &pgproto3.Execute{}, &pgproto3.Sync{})}}})
	if _, err := stream.Recv(); pgerr.Code(sidecar.ErrorFromStatus(err)) != pgerr.ProtocolViolation {
		t.Errorf("a reference to a statement never sent: %v, want 08P01", err)
	}
}
