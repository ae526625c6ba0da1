package activities_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/router"
	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/topo/store"
)

// bypasses are the ways a client undoes Postgres's own fence
// (default_transaction_read_only, a setting any session may change).
// Each writes its own value into fence_probe; %s is that value.
var bypasses = []struct{ name, sql string }{
	{"SET default_transaction_read_only", "SET default_transaction_read_only = off; COMMIT; INSERT INTO fence_probe VALUES ('%s')"},
	{"SET SESSION CHARACTERISTICS", "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE; COMMIT; INSERT INTO fence_probe VALUES ('%s')"},
	{"SET transaction_read_only", "SET transaction_read_only = off; INSERT INTO fence_probe VALUES ('%s')"},
	{"BEGIN READ WRITE", "BEGIN READ WRITE; INSERT INTO fence_probe VALUES ('%s'); COMMIT"},
	{"set_config", "SELECT set_config('default_transaction_read_only', 'off', false); COMMIT; INSERT INTO fence_probe VALUES ('%s')"},
}

// TestFenceRefusesEveryWayAroundIt fences the primary and tries every
// way around Postgres's fence, through its sidecar and through a router,
// from sessions opened before the fence and after: none may write, no
// client backend may stay connected, and unfencing restores service.
func TestFenceRefusesEveryWayAroundIt(t *testing.T) {
	ctx := testCtx(t)
	primary := currentPrimary(t)
	exec(t, primary, "CREATE TABLE IF NOT EXISTS fence_probe (v text); TRUNCATE fence_probe")
	rt := startRouter(t)

	sc, err := sidecar.Dial(sidecarAddr(t, primary), sidecar.DialOptions{Secret: secret})
	if err != nil {
		t.Fatal(err)
	}
	defer sc.Close()
	readWrite := []*pb.Setting{{Name: "default_transaction_read_only", Value: "off"}}

	// Sessions opened before the fence: one pinned with a read-write
	// default, one whose reads share pipelined connections, and router
	// connections that made themselves read-write.
	pinned := openSession(t, sc)
	wantNoError(t, "pinning", runBatch(t, pinned, &pb.Batch{Mode: pb.Mode_SESSION, Settings: readWrite,
		Frontend: simpleQuery("SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE; INSERT INTO fence_probe VALUES ('before')")}))
	reader := openSession(t, sc)
	for range 3 {
		wantNoError(t, "pipelined read", runBatch(t, reader, &pb.Batch{Mode: pb.Mode_STATEMENT, Autocommit: true, Frontend: simpleQuery("SELECT 1")}))
	}
	before := routerConn(t, rt.Addr())
	if _, err := before.Exec(ctx, "SET default_transaction_read_only = off"); err != nil {
		t.Fatal(err)
	}
	beforeChar := routerConn(t, rt.Addr())
	if _, err := beforeChar.Exec(ctx, "SET SESSION CHARACTERISTICS AS TRANSACTION READ WRITE"); err != nil {
		t.Fatal(err)
	}
	// Connected now: once the primary is fenced the router cannot read
	// the roles it authenticates new clients with.
	routerConns := make([]*pgx.Conn, len(bypasses)+1)
	for i := range routerConns {
		routerConns[i] = routerConn(t, rt.Addr())
	}

	must[activities.FenceResult](t, acts.FenceInstance, activities.InstanceInput{Shard: shard, Instance: primary})
	t.Cleanup(func() {
		must[struct{}](t, acts.UnfenceInstance, activities.InstanceInput{Shard: shard, Instance: primary})
	})

	var wrote []string
	attempt := func(value, how string, err error) {
		t.Helper()
		if err == nil {
			wrote = append(wrote, value+" ("+how+")")
		}
	}

	// Through the sidecar, on a session opened now and carrying the
	// read-write default as its settings.
	fresh := openSession(t, sc)
	for i, b := range bypasses {
		v := fmt.Sprintf("sidecar-%d", i)
		attempt(v, b.name, runBatch(t, fresh, &pb.Batch{Mode: pb.Mode_STATEMENT, Settings: readWrite, Frontend: simpleQuery(fmt.Sprintf(b.sql, v))}))
	}
	// Extended protocol, several Syncs in one batch: the first turns the
	// default off and ends its transaction, the second writes.
	attempt("sidecar-extended", "extended protocol, two Syncs", runBatch(t, fresh, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: extended(
		"SELECT set_config('default_transaction_read_only', 'off', false)", "INSERT INTO fence_probe VALUES ('sidecar-extended')")}))
	attempt("sidecar-pinned", "session pinned before the fence", runBatch(t, pinned, &pb.Batch{Mode: pb.Mode_SESSION, Settings: readWrite,
		Frontend: simpleQuery("INSERT INTO fence_probe VALUES ('sidecar-pinned')")}))
	if err := runBatch(t, reader, &pb.Batch{Mode: pb.Mode_STATEMENT, Autocommit: true, Frontend: simpleQuery("SELECT 1")}); err == nil {
		t.Error("a fenced primary served a pipelined read")
	}

	// Through a router.
	for i, b := range bypasses {
		v := fmt.Sprintf("router-%d", i)
		_, err := routerConns[i].Exec(ctx, fmt.Sprintf(b.sql, v))
		attempt(v, "router: "+b.name, err)
	}
	_, err = before.Exec(ctx, "INSERT INTO fence_probe VALUES ('router-set-before')")
	attempt("router-set-before", "router: SET before the fence", err)
	_, err = beforeChar.Exec(ctx, "INSERT INTO fence_probe VALUES ('router-characteristics-before')")
	attempt("router-characteristics-before", "router: SET SESSION CHARACTERISTICS before the fence", err)
	pc := routerConns[len(bypasses)].PgConn()
	p := pc.StartPipeline(ctx)
	p.SendQueryParams("SELECT set_config('default_transaction_read_only', 'off', false)", nil, nil, nil, nil)
	p.SendPipelineSync()
	p.SendQueryParams("INSERT INTO fence_probe VALUES ('router-pipeline')", nil, nil, nil, nil)
	p.SendPipelineSync()
	attempt("router-pipeline", "router: extended protocol, two Syncs", pipelineErr(p))

	if len(wrote) > 0 {
		t.Errorf("a fenced primary took writes: %v", wrote)
	}
	if n, err := query(t, primary, "SELECT count(*)::text FROM fence_probe WHERE v <> 'before'"); err != nil || n != "0" {
		t.Errorf("fence_probe has %s rows written after the fence (%v)", n, err)
	}
	// The fence ended every client backend. Polled for a moment: the
	// backend of this test's own previous query (query closes its
	// connection) leaves pg_stat_activity only once it has exited.
	eventually(t, 5*time.Second, "client backends still connected to the fenced primary", func() error {
		left, err := query(t, primary, `SELECT coalesce(string_agg(application_name || ' (' || state || '): ' || left(query, 60), '; '), '')
			FROM pg_stat_activity WHERE backend_type = 'client backend'
			AND pid <> pg_backend_pid() AND application_name IS DISTINCT FROM 'pgmanager'`)
		if err == nil && left != "" {
			err = fmt.Errorf("%s", left)
		}
		return err
	})

	must[struct{}](t, acts.UnfenceInstance, activities.InstanceInput{Shard: shard, Instance: primary})
	wantNoError(t, "writing through the sidecar after Unfence", runBatch(t, openSession(t, sc), &pb.Batch{Mode: pb.Mode_STATEMENT,
		Frontend: simpleQuery("INSERT INTO fence_probe VALUES ('after')")}))
	eventually(t, 10*time.Second, "a write through the router after Unfence", func() error {
		_, err := before.Exec(ctx, "INSERT INTO fence_probe VALUES ('after')")
		return err
	})
}

// sidecarAddr is the gRPC address an instance's sidecar registered.
func sidecarAddr(t *testing.T, instance string) string {
	t.Helper()
	recs, err := st.ListRecords(testCtx(t), store.KindSidecar)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range recs {
		if r.InstanceID == instance {
			return r.GRPCAddr
		}
	}
	t.Fatalf("no sidecar registered for %s", instance)
	return ""
}

// startRouter runs a router on the test cluster, whose only shard, s1,
// holds every table.
func startRouter(t *testing.T) *router.Server {
	t.Helper()
	ctx := testCtx(t)
	tp, err := topo.Parse([]byte(`{"authoritative_shard_group": "main",
		"shard_groups": [{"uid": "main", "key_ranges": [{"shard_uid": "s1"}]}]}`))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.ApplyTopology(ctx, tp, store.ApplyOptions{ExpectedRevision: store.AnyRevision}); err != nil {
		t.Fatal(err)
	}
	// A short buffer window: a statement held for the fenced primary
	// fails soon instead of waiting 10 s.
	rt, err := router.New(router.Config{ListenAddr: "127.0.0.1:0", Store: st, Secret: secret,
		Buffer: router.BufferConfig{Window: 300 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Start(ctx); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Stop(context.Background()) })
	return rt
}

func routerConn(t *testing.T, addr string) *pgx.Conn {
	t.Helper()
	ctx := testCtx(t)
	c, err := pgx.Connect(ctx, fmt.Sprintf("postgres://postgres:postgres@%s/postgres?sslmode=disable", addr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close(context.Background()) })
	return c
}

func openSession(t *testing.T, c *sidecar.Client) *sidecar.ClientSession {
	t.Helper()
	s, err := c.OpenSession(testCtx(t), "postgres", "postgres")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// runBatch runs a batch and returns the first error in its answer.
func runBatch(t *testing.T, s *sidecar.ClientSession, batch *pb.Batch) error {
	t.Helper()
	var raw bytes.Buffer
	if _, err := s.Run(batch, func(chunk []byte) error { raw.Write(chunk); return nil }); err != nil {
		return err
	}
	fe := pgproto3.NewFrontend(bytes.NewReader(raw.Bytes()), io.Discard)
	for {
		msg, err := fe.Receive()
		if err != nil {
			return nil
		}
		if e, ok := msg.(*pgproto3.ErrorResponse); ok {
			return pgconn.ErrorResponseToPgError(e)
		}
	}
}

func wantNoError(t *testing.T, what string, err error) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

func simpleQuery(sql string) []byte {
	out, _ := (&pgproto3.Query{String: sql}).Encode(nil)
	return out
}

// extended is each statement as Parse, Bind, Execute and its own Sync.
func extended(sqls ...string) []byte {
	var out []byte
	for _, sql := range sqls {
		for _, m := range []pgproto3.FrontendMessage{&pgproto3.Parse{Query: sql}, &pgproto3.Bind{}, &pgproto3.Execute{}, &pgproto3.Sync{}} {
			out, _ = m.Encode(out)
		}
	}
	return out
}

// pipelineErr reads a pipeline's results and returns the first error.
func pipelineErr(p *pgconn.Pipeline) error {
	var first error
	for {
		res, err := p.GetResults()
		if err != nil {
			if first == nil {
				first = err
			}
			break
		}
		if res == nil {
			break
		}
		switch r := res.(type) {
		case *pgconn.ResultReader:
			if _, err := r.Close(); err != nil && first == nil {
				first = err
			}
		case *pgconn.PipelineSync:
		}
	}
	if err := p.Close(); err != nil && first == nil {
		first = err
	}
	return first
}
