package sidecar_test

import (
	"bytes"
	"context"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// TestDeposedPrimaryAbandonsItsStatements: a statement waiting on a
// Postgres backend that no longer answers (its process stopped, as in a
// hung primary) ends with 08006 as soon as the shard state names another
// primary, instead of waiting for the backend to wake up; the instance
// serves new sessions afterwards.
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

	if got := query(t, open(t, c), pb.Mode_STATEMENT, "SELECT 1").one(t); got != "1" {
		t.Fatalf("a new session after the deposition: %q", got)
	}
}
