package sidecar_test

import (
	"context"
	"testing"
	"time"

	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
	"github.com/tesseradb/tessera/topo/store"
	"github.com/tesseradb/tessera/topo/store/etcdembed"
)

// TestHealthFollowsPostgres stops and starts Postgres under a sidecar and
// watches the health stream report it; it also checks the registration
// in the topology service.
func TestHealthFollowsPostgres(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inst, err := startInstance(ctx, "health")
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())

	endpoints := etcdembed.Start(t)
	st, err := store.Dial(ctx, endpoints, "healthtest")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	srv, err := sidecar.New(sidecar.Config{
		ShardUID: "shard-7", InstanceID: "health", Zone: "zone-a", ListenAddr: "127.0.0.1:0", PostgresAddr: "127.0.0.1:1",
		Secret: secret, Manager: inst, Store: st, HealthInterval: 100 * time.Millisecond, HeartbeatInterval: 500 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Start(ctx); err != nil {
		t.Fatal(err)
	}
	defer srv.Stop(context.Background())

	recs, err := st.ListRecords(ctx, store.KindSidecar)
	if err != nil || len(recs) != 1 || recs[0].ShardUID != "shard-7" || recs[0].Role != "primary" || recs[0].GRPCAddr != srv.Addr() || recs[0].Zone != "zone-a" {
		t.Fatalf("registration: %+v, %v", recs, err)
	}

	c := dial(t, srv)
	stream, err := c.Health(ctx, &pb.HealthRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next := func(want func(*pb.HealthStatus) bool, what string) *pb.HealthStatus {
		t.Helper()
		for {
			h, err := stream.Recv()
			if err != nil {
				t.Fatalf("waiting for %s: %v", what, err)
			}
			if want(h) {
				return h
			}
		}
	}
	h := next(func(h *pb.HealthStatus) bool { return h.Serving }, "serving")
	if !h.Writable || h.Role != "primary" || h.CurrentLsn == "" || h.DiskFreeBytes == 0 || h.InstanceId != "health" {
		t.Fatalf("first status: %v", h)
	}
	if err := inst.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	h = next(func(h *pb.HealthStatus) bool { return !h.Serving }, "not serving")
	if h.Writable {
		t.Errorf("a stopped instance reported writable: %v", h)
	}
	if err := inst.Start(ctx); err != nil {
		t.Fatal(err)
	}
	next(func(h *pb.HealthStatus) bool { return h.Serving && h.Writable }, "serving again")

	// Fencing shows in health at once, and the sidecar refuses every
	// statement (fence.go).
	if _, err := c.Fence(ctx, &pb.FenceRequest{}); err != nil {
		t.Fatal(err)
	}
	next(func(h *pb.HealthStatus) bool { return h.Fenced && !h.Writable }, "fenced")
	s := open(t, c)
	if r := query(t, s, pb.Mode_STATEMENT, "CREATE TABLE fenced_out (x int)"); len(r.errors) != 1 || r.errors[0] != "57P03" {
		t.Errorf("write on a fenced instance: %v", r)
	}
	if _, err := c.Unfence(ctx, &pb.UnfenceRequest{}); err != nil {
		t.Fatal(err)
	}
	next(func(h *pb.HealthStatus) bool { return !h.Fenced && h.Writable }, "unfenced")

	// Stop ends the registration at once.
	srv.Stop(ctx)
	if recs, err := st.ListRecords(ctx, store.KindSidecar); err != nil || len(recs) != 0 {
		t.Errorf("after Stop: %+v, %v", recs, err)
	}
}
