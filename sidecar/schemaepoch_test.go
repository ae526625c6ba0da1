package sidecar_test

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// TestStatementPreparedAfterDDLSeesTheNewSchema: a statement shared by
// content, prepared on a connection before DDL changed its result type,
// is not reused for a session that asks for it after the change: one
// Postgres would plan that session's statement afresh, not answer 0A000
// "cached plan must not change result type". With pipelining on and
// off: shared connections close their stale statements too.
func TestStatementPreparedAfterDDLSeesTheNewSchema(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		autocommit bool
	}{{"own connection", false}, {"shared connection", true}} {
		t.Run(tc.name, func(t *testing.T) {
			cfg := sidecar.DefaultPoolConfig
			cfg.Capacity = 1 // every session on the one connection
			if tc.autocommit {
				cfg.PipelineConns = 1
			}
			srv := startSidecarAs(t, shared, "schemaepoch-"+map[bool]string{false: "own", true: "shared"}[tc.autocommit], cfg)
			c := dial(t, srv)
			table := "schemaepoch_" + map[bool]string{false: "own", true: "shared"}[tc.autocommit]
			query(t, open(t, c), pb.Mode_STATEMENT, "DROP TABLE IF EXISTS "+table+"; CREATE TABLE "+table+" (v int); INSERT INTO "+table+" VALUES (7)")
			stmt := &pb.PreparedStatement{Name: table + "_read", Query: "SELECT v FROM " + table}
			read := func() answer {
				return run(t, open(t, c), &pb.Batch{Mode: pb.Mode_STATEMENT, Autocommit: tc.autocommit, Prepared: []*pb.PreparedStatement{stmt},
					Frontend: encode(t, &pgproto3.Bind{PreparedStatement: stmt.Name}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})})
			}
			for range 2 {
				if a := read(); len(a.errors) != 0 || a.one(t) != "7" {
					t.Fatalf("before the change: %v", a)
				}
			}
			if a := query(t, open(t, c), pb.Mode_STATEMENT, "ALTER TABLE "+table+" ALTER COLUMN v TYPE text"); len(a.errors) != 0 {
				t.Fatalf("the change: %v", a)
			}
			if a := read(); len(a.errors) != 0 || a.one(t) != "7" {
				t.Fatalf("a session's statement after the change: %v", a)
			}
		})
	}
}

// TestAnnouncedSchemaChangeRefreshesStatements: DDL that did not pass
// through the sidecar (an OnlineDDL swap, run straight on Postgres) is
// announced in the topology service; once the sidecar has heard of it,
// the next session's statement is planned afresh, without a 0A000 first.
func TestAnnouncedSchemaChangeRefreshesStatements(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	st, err := store.Dial(ctx, etcdembed.Start(t), "schemaepochtest")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const instance = "schemaepoch-etcd"
	if _, err := st.UpdateShardState(ctx, "shard-se", func(s *store.ShardState) error {
		s.Primary, s.Term = instance, 1
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	pool := sidecar.DefaultPoolConfig
	pool.Capacity = 1
	srv, err := sidecar.New(sidecar.Config{
		ShardUID: "shard-se", InstanceID: instance, ListenAddr: "127.0.0.1:0",
		Secret: secret, Manager: shared, Store: st, Pool: pool,
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
	const table = "schemaepoch_announced"
	query(t, open(t, c), pb.Mode_STATEMENT, "DROP TABLE IF EXISTS "+table+"; CREATE TABLE "+table+" (v int); INSERT INTO "+table+" VALUES (7)")
	stmt := &pb.PreparedStatement{Name: table + "_read", Query: "SELECT v FROM " + table}
	read := func() answer {
		return run(t, open(t, c), &pb.Batch{Mode: pb.Mode_STATEMENT, Prepared: []*pb.PreparedStatement{stmt},
			Frontend: encode(t, &pgproto3.Bind{PreparedStatement: stmt.Name}, &pgproto3.Describe{ObjectType: 'P'}, &pgproto3.Execute{}, &pgproto3.Sync{})})
	}
	if a := read(); len(a.errors) != 0 || a.one(t) != "7" {
		t.Fatalf("before the change: %v", a)
	}
	direct, err := pgx.Connect(ctx, shared.ConnConfig("postgres", "postgres"))
	if err != nil {
		t.Fatal(err)
	}
	defer direct.Close(context.Background())
	if _, err := direct.Exec(ctx, "ALTER TABLE "+table+" ALTER COLUMN v TYPE text"); err != nil {
		t.Fatal(err)
	}
	before := srv.SchemaChanges()
	if err := st.AnnounceSchemaChange(ctx, store.SchemaChange{Database: "postgres", By: "test", At: time.Now()}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the sidecar counts the announced change", func() bool { return srv.SchemaChanges() > before })
	if a := read(); len(a.errors) != 0 || a.one(t) != "7" {
		t.Fatalf("a session's statement after the announced change: %v", a)
	}
}
