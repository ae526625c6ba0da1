package sidecar_test

import (
	"bufio"
	"context"
	"io"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// BenchmarkSessionBatch runs a point lookup's batch (Bind, Execute and
// Sync of a prepared statement with one parameter) through a session by
// each way a router reaches a sidecar, and the same bytes straight to
// Postgres's unix socket ("direct") as the floor. ns/op is one client's
// round trip, Postgres's work included; allocs/op is the client's and
// the sidecar's.
func BenchmarkSessionBatch(b *testing.B) {
	srv := startSidecarAs(b, shared, "bench", sidecar.PoolConfig{})
	ctx := context.Background()
	stmt := &pb.PreparedStatement{Name: "bench_lookup", Query: "SELECT $1::int8 + 1", ParamOids: []uint32{20}}
	frontend := encode(b,
		&pgproto3.Bind{PreparedStatement: stmt.Name, ParameterFormatCodes: []int16{0}, Parameters: [][]byte{[]byte("41")}},
		&pgproto3.Execute{}, &pgproto3.Sync{})
	b.Run("direct", func(b *testing.B) {
		pc, err := pgconn.Connect(ctx, shared.ConnConfig("postgres", "postgres"))
		if err != nil {
			b.Fatal(err)
		}
		if _, err := pc.Prepare(ctx, stmt.Name, stmt.Query, stmt.ParamOids); err != nil {
			b.Fatal(err)
		}
		h, err := pc.Hijack()
		if err != nil {
			b.Fatal(err)
		}
		defer h.Conn.Close()
		r := bufio.NewReader(h.Conn)
		answer := make([]byte, 5+13+14+6)
		b.ReportAllocs()
		for b.Loop() {
			if _, err := h.Conn.Write(frontend); err != nil {
				b.Fatal(err)
			}
			if _, err := io.ReadFull(r, answer); err != nil || answer[len(answer)-6] != 'Z' {
				b.Fatalf("answer %q: %v", answer, err)
			}
		}
	})
	opts := sidecar.DialOptions{Secret: secret, ShardUID: "shard-0", InstanceID: "bench"}
	for _, c := range []struct {
		name      string
		path      string
		inProcess bool
	}{
		{"in-process", "", true},
		{"unix-socket", srv.SessionSocket(), false},
		{"tcp", "", false},
	} {
		b.Run(c.name, func(b *testing.B) {
			opts := opts
			opts.InProcess = c.inProcess
			s, _, err := sidecar.DialLocalSession(ctx, c.path, srv.SessionAddr(), opts, "postgres", "postgres", "")
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			batch := &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: frontend, Prepared: []*pb.PreparedStatement{stmt}}
			var answer int
			fn := func(chunk []byte, last bool) error { answer += len(chunk); return nil }
			b.ReportAllocs()
			for b.Loop() {
				answer = 0
				if _, err := s.RunLast(batch, fn); err != nil {
					b.Fatal(err)
				}
				// BindComplete, DataRow "42", CommandComplete, ReadyForQuery.
				if answer != 5+13+14+6 {
					b.Fatalf("answer of %d bytes", answer)
				}
			}
		})
	}
}

// BenchmarkConcurrentLookups runs the point lookup of
// BenchmarkSessionBatch from 8 in-process sessions at once, as autocommit
// batches on pipelined connections and as ordinary batches each on a
// connection of its own. ns/op is the wall time per lookup across all
// sessions, Postgres's work included, on however many cores there are.
func BenchmarkConcurrentLookups(b *testing.B) {
	stmt := &pb.PreparedStatement{Name: "bench_lookup", Query: "SELECT $1::int8 + 1", ParamOids: []uint32{20}}
	frontend := encode(b,
		&pgproto3.Bind{PreparedStatement: stmt.Name, ParameterFormatCodes: []int16{0}, Parameters: [][]byte{[]byte("41")}},
		&pgproto3.Execute{}, &pgproto3.Sync{})
	for _, pipelined := range []bool{true, false} {
		name := "own-connections"
		if pipelined {
			name = "pipelined"
		}
		b.Run(name, func(b *testing.B) {
			cfg := sidecar.DefaultPoolConfig
			if !pipelined {
				cfg.PipelineConns = 0
			}
			id := "bench-" + name
			srv := startSidecarAs(b, shared, id, cfg)
			opts := sidecar.DialOptions{Secret: secret, ShardUID: "shard-0", InstanceID: id, InProcess: true}
			b.SetParallelism(4) // 8 sessions on this 2-core machine
			b.ReportAllocs()
			b.RunParallel(func(p *testing.PB) {
				s, _, err := sidecar.DialLocalSession(context.Background(), "", srv.SessionAddr(), opts, "postgres", "postgres", "")
				if err != nil {
					b.Error(err)
					return
				}
				defer s.Close()
				batch := &pb.Batch{Mode: pb.Mode_STATEMENT, Autocommit: true, Frontend: frontend, Prepared: []*pb.PreparedStatement{stmt}}
				var answer int
				fn := func(chunk []byte, last bool) error { answer += len(chunk); return nil }
				for p.Next() {
					answer = 0
					if _, err := s.RunLast(batch, fn); err != nil {
						b.Error(err)
						return
					}
					if answer != 5+13+14+6 {
						b.Errorf("answer of %d bytes", answer)
						return
					}
				}
			})
		})
	}
}
