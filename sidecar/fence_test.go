package sidecar_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgproto3"

	"github.com/tesseradb/tessera/sidecar"
	pb "github.com/tesseradb/tessera/sidecar/sidecarpb"
)

// TestSidecarStartsFencedInFrontOfAFencedInstance: a sidecar that starts
// (after a crash, say) in front of an instance fenced earlier refuses
// client batches from the first one, whatever their settings, and
// serves again once unfenced. A sidecar that learned the fence only
// later from its health checks would let the first batches through.
func TestSidecarStartsFencedInFrontOfAFencedInstance(t *testing.T) {
	t.Parallel()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	inst, err := startInstance(ctx, "fenced-start")
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Close(context.Background())
	if err := inst.Fence(ctx); err != nil {
		t.Fatal(err)
	}
	srv := startSidecar(t, inst, sidecar.PoolConfig{})
	if h := srv.LatestHealth(); !h.Fenced || h.Writable {
		t.Errorf("health of a fenced instance: fenced %v, writable %v", h.Fenced, h.Writable)
	}
	c := dial(t, srv)
	s := open(t, c)
	readWrite := []*pb.Setting{{Name: "default_transaction_read_only", Value: "off"}}
	a := run(t, s, &pb.Batch{Mode: pb.Mode_STATEMENT, Settings: readWrite,
		Frontend: encode(t, &pgproto3.Query{String: "CREATE TABLE written_while_fenced (id int)"})})
	if !slices.Equal(a.errors, []string{"57P03"}) {
		t.Fatalf("a batch on a fenced instance: %v; want 57P03 and nothing run", a)
	}
	if _, err := c.Unfence(ctx, &pb.UnfenceRequest{}); err != nil {
		t.Fatal(err)
	}
	a = run(t, s, &pb.Batch{Mode: pb.Mode_STATEMENT, Frontend: encode(t, &pgproto3.Query{String: "SELECT count(*) FROM pg_class WHERE relname = 'written_while_fenced'"})})
	if len(a.errors) > 0 || a.one(t) != "0" {
		t.Fatalf("after Unfence: %v", a)
	}
}
