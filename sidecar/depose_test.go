package sidecar_test

import (
	"bytes"
	"context"
	"slices"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// TestDeposedPrimaryAbandonsItsStatements: a statement waiting on a
// Postgres backend that no longer answers (its process stopped, as in a
// hung primary) ends with 08006 as soon as the shard state names another
// primary, instead of waiting for the backend to wake up. Afterwards the
// instance, a deposed primary, refuses new batches with 57P03 (it fences
// itself: TestDeposedPrimaryFencesItself).
func TestDeposedPrimaryAbandonsItsStatements(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Dial(ctx, etcdembed.Start(t), "deposetest")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	setPrimary := func(id string) {
		t.Helper()
		if _, err := st.UpdateShardState(ctx, "shard-9", func(s *store.ShardState) error {
			s.Primary = id
			s.Term++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	setPrimary("depose-0")
	// The deposed instance fences itself: give the shared instance back
	// its writes once the stopped backend is gone (cleanups run last
	// first).
	t.Cleanup(func() {
		if err := shared.Unfence(context.Background()); err != nil {
			t.Error(err)
		}
	})
	srv, err := sidecar.New(sidecar.Config{
		ShardUID: "shard-9", InstanceID: "depose-0", ListenAddr: "127.0.0.1:0", PostgresAddr: "127.0.0.1:1",
		Secret: secret, Manager: shared, Store: st, Pool: sidecar.DefaultPoolConfig,
		HealthInterval: 200 * time.Millisecond, HeartbeatInterval: time.Second,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())
	c := dial(t, srv)
	s := open(t, c)

	pid, err := strconv.Atoi(query(t, s, pb.Mode_TRANSACTION, "BEGIN; SELECT pg_backend_pid()").one(t))
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGCONT) })

	type outcome struct {
		answer []byte
		err    error
	}
	done := make(chan outcome, 1)
	go func() {
		var got bytes.Buffer
		_, err := s.Run(&pb.Batch{Mode: pb.Mode_TRANSACTION, Frontend: encode(t, &pgproto3.Query{String: "INSERT INTO pg_temp.nothing VALUES (1)"})},
			func(chunk []byte) error { got.Write(chunk); return nil })
		done <- outcome{got.Bytes(), err}
	}()
	select {
	case o := <-done:
		t.Fatalf("a statement on a stopped backend answered: %q, %v", o.answer, o.err)
	case <-time.After(300 * time.Millisecond):
	}

	deposed := time.Now()
	setPrimary("depose-1")
	select {
	case o := <-done:
		t.Logf("answered %v after the new primary was published: %q", time.Since(deposed).Round(time.Millisecond), o.answer)
		if o.err != nil || !bytes.Contains(o.answer, []byte("C08006")) {
			t.Fatalf("the abandoned statement's answer: %q, %v; want an 08006 error", o.answer, o.err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the statement on the deposed primary still waits 5 s after another primary was published")
	}

	if a := query(t, open(t, c), pb.Mode_STATEMENT, "SELECT 1"); !slices.Equal(a.errors, []string{"57P03"}) {
		t.Fatalf("a new session after the deposition: %v; want 57P03", a)
	}
}

// TestDeposedPrimaryFencesItself: an instance whose Postgres runs as a
// primary while the shard's state names another instance (a crashed
// primary whose host came back after a failover) refuses client batches
// with 57P03 and has Postgres fenced, whether its sidecar starts so or
// sees the state change while running; a state naming the instance
// itself leaves it serving.
func TestDeposedPrimaryFencesItself(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	inst, err := startInstance(ctx, "selffence")
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	st, err := store.Dial(ctx, etcdembed.Start(t), "selffencetest")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	setPrimary := func(id string) {
		t.Helper()
		if _, err := st.UpdateShardState(ctx, "shard-7", func(s *store.ShardState) error {
			s.Primary = id
			s.Term++
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	start := func() *sidecar.Server {
		t.Helper()
		srv, err := sidecar.New(sidecar.Config{
			ShardUID: "shard-7", InstanceID: "selffence", ListenAddr: "127.0.0.1:0", PostgresAddr: "127.0.0.1:1",
			Secret: secret, Manager: inst, Store: st, Pool: sidecar.DefaultPoolConfig,
			HealthInterval: 200 * time.Millisecond, HeartbeatInterval: time.Second,
		})
		if err != nil {
			t.Fatal(err)
		}
		if err := srv.Start(ctx); err != nil {
			t.Fatal(err)
		}
		return srv
	}
	// readOnly asks Postgres directly, in a new session.
	readOnly := func() (bool, error) {
		c, err := pgx.Connect(ctx, inst.ConnConfig("postgres", "postgres"))
		if err != nil {
			return false, err
		}
		defer c.Close(ctx)
		var v string
		if err := c.QueryRow(ctx, "SHOW default_transaction_read_only").Scan(&v); err != nil {
			return false, err
		}
		return v == "on", nil
	}
	// postgresFenced is readOnly while a fence may be under way: the fence
	// terminates every client backend, so a probe that races it can be
	// ended (57P01). That answers nothing yet, and the caller asks again.
	postgresFenced := func() bool {
		on, err := readOnly()
		return err == nil && on
	}
	refused := func(srv *sidecar.Server) bool {
		t.Helper()
		a := query(t, open(t, dial(t, srv)), pb.Mode_STATEMENT, "CREATE TABLE IF NOT EXISTS written_by_a_deposed_primary (id int)")
		return slices.Equal(a.errors, []string{"57P03"})
	}
	serves := func(srv *sidecar.Server) {
		t.Helper()
		a := query(t, open(t, dial(t, srv)), pb.Mode_STATEMENT, "SELECT 1")
		if len(a.errors) > 0 || a.one(t) != "1" {
			t.Fatalf("a batch on the recorded primary: %v", a)
		}
	}

	t.Run("at start", func(t *testing.T) {
		setPrimary("selffence-other")
		srv := start()
		defer srv.Stop(context.Background())
		if !refused(srv) {
			t.Fatal("the first batch on a deposed primary was not refused with 57P03")
		}
		eventually(t, "Postgres fenced", postgresFenced)
		// Health is observed every HealthInterval, and the fence ends the
		// status connection the observation reads (one observation may
		// then fail): the report follows within a few observations.
		eventually(t, "health reports a fenced, unwritable primary", func() bool {
			h := srv.LatestHealth()
			return h.Fenced && !h.Writable
		})
	})

	// The instance rejoins as the primary: unfenced, recorded again.
	if err := inst.Unfence(ctx); err != nil {
		t.Fatal(err)
	}
	setPrimary("selffence")

	t.Run("on a state change", func(t *testing.T) {
		srv := start()
		defer srv.Stop(context.Background())
		serves(srv)
		time.Sleep(time.Second) // several health observations
		serves(srv)
		if on, err := readOnly(); err != nil || on {
			t.Fatalf("the recorded primary's Postgres: read-only %v, %v", on, err)
		}
		setPrimary("selffence-other")
		eventually(t, "batches refused with 57P03", func() bool { return refused(srv) })
		eventually(t, "Postgres fenced", postgresFenced)
		if !refused(srv) {
			t.Fatal("a batch on the deposed primary ran after it fenced itself")
		}
	})
}
