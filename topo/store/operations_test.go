package store

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/tesseradb/tessera/pgerr"
)

// TestOperationRecords: a record is rewritten by a retried begin, removed
// only by its own run's end, and a delete of a record that changed since
// it was read removes nothing.
func TestOperationRecords(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Dial(ctx, EtcdEndpoints, "operations-test")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	op := Operation{Shard: "s1", Kind: "switchover", WorkflowID: "switchover-s1-at", RunID: "r1", Since: time.Now()}
	for range 2 {
		if err := s.BeginOperation(ctx, op); err != nil {
			t.Fatal(err)
		}
	}
	if err := s.BeginOperation(ctx, Operation{Shard: "s10", Kind: "failover", WorkflowID: "failover-s10", RunID: "r"}); err != nil {
		t.Fatal(err)
	}
	ops, err := s.ListOperations(ctx, "s1")
	if err != nil || len(ops) != 1 || ops[0].WorkflowID != op.WorkflowID || ops[0].RunID != "r1" || ops[0].Kind != "switchover" {
		t.Fatalf("ListOperations(s1) = %+v, %v", ops, err)
	}
	if err := s.EndOperation(ctx, "s1", op.WorkflowID, "another-run"); err != nil {
		t.Fatal(err)
	}
	stale := ops[0]
	op.RunID = "r2" // a later run of the same id
	if err := s.BeginOperation(ctx, op); err != nil {
		t.Fatal(err)
	}
	if err := s.DeleteOperation(ctx, stale); err != nil {
		t.Fatal(err)
	}
	if ops, _ := s.ListOperations(ctx, "s1"); len(ops) != 1 || ops[0].RunID != "r2" {
		t.Fatalf("after another run's end and a stale delete: %+v", ops)
	}
	if err := s.EndOperation(ctx, "s1", op.WorkflowID, "r2"); err != nil {
		t.Fatal(err)
	}
	if ops, _ := s.ListOperations(ctx, "s1"); len(ops) != 0 {
		t.Fatalf("after its end: %+v", ops)
	}
	if ops, _ := s.ListOperations(ctx, "s10"); len(ops) != 1 {
		t.Fatalf("s10's record: %+v", ops)
	}
}

// TestOperationExclusion: a switchover does not begin while a cutover
// holds the shard, nor a cutover (all its shards or none) while a
// switchover or failover does; a failover always begins; a workflow
// rewrites its own record; and of many racing begins exactly the
// compatible ones pass.
func TestOperationExclusion(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	s, err := Dial(ctx, EtcdEndpoints, "exclusion-test")
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	cut := func(id string, shards ...string) []Operation {
		var ops []Operation
		for _, sh := range shards {
			ops = append(ops, Operation{Shard: sh, Kind: "cutover", WorkflowID: id, RunID: "r"})
		}
		return ops
	}
	conflict := func(err error) bool { return pgerr.Code(err) == pgerr.ObjectInUse }

	if err := s.BeginOperations(ctx, cut("reshard-a", "a1", "a2")); err != nil {
		t.Fatal(err)
	}
	if err := s.BeginOperations(ctx, cut("reshard-a", "a1", "a2")); err != nil {
		t.Fatalf("rewriting its own records: %v", err)
	}
	sw := Operation{Shard: "a2", Kind: "switchover", WorkflowID: "switchover-a2", RunID: "r"}
	if err := s.BeginOperation(ctx, sw); !conflict(err) {
		t.Fatalf("switchover during a cutover: %v, want SQLSTATE 55006", err)
	} else if !strings.Contains(err.Error(), "reshard-a") {
		t.Errorf("the refusal does not name the cutover: %v", err)
	}
	if ops, _ := s.ListOperations(ctx, "a2"); len(ops) != 1 {
		t.Fatalf("a refused begin wrote a record: %+v", ops)
	}
	fo := Operation{Shard: "a1", Kind: "failover", WorkflowID: "failover-a1", RunID: "r"}
	if err := s.BeginOperation(ctx, fo); err != nil {
		t.Fatalf("a failover during a cutover must begin: %v", err)
	}
	for _, sh := range []string{"a1", "a2"} {
		if err := s.EndOperation(ctx, sh, "reshard-a", "r"); err != nil {
			t.Fatal(err)
		}
	}
	// The failover on a1 keeps a cutover of a1 and a3 off both.
	if err := s.BeginOperations(ctx, cut("reshard-b", "a3", "a1")); !conflict(err) {
		t.Fatalf("cutover during a failover: %v, want SQLSTATE 55006", err)
	}
	if ops, _ := s.ListOperations(ctx, "a3"); len(ops) != 0 {
		t.Fatalf("a refused cutover recorded itself on another shard: %+v", ops)
	}
	if err := s.BeginOperation(ctx, sw); err != nil {
		t.Fatalf("switchover once the cutover ended: %v", err)
	}
	if err := s.BeginOperations(ctx, cut("reshard-b", "a2")); !conflict(err) {
		t.Fatalf("cutover during a switchover: %v, want SQLSTATE 55006", err)
	}
	// Repairs and rejoins exclude nothing.
	if err := s.BeginOperation(ctx, Operation{Shard: "a4", Kind: "rejoin", WorkflowID: "rejoin-x", RunID: "r"}); err != nil {
		t.Fatal(err)
	}
	if err := s.BeginOperations(ctx, cut("reshard-c", "a4")); err != nil {
		t.Fatalf("cutover beside a rejoin: %v", err)
	}

	// Racing: a cutover and a switchover on shard r, many times over;
	// exactly one of each pair records itself.
	for i := range 20 {
		shard := fmt.Sprintf("r%d", i)
		var wg sync.WaitGroup
		errs := make([]error, 2)
		wg.Add(2)
		go func() {
			defer wg.Done()
			errs[0] = s.BeginOperations(ctx, cut("reshard-r", shard, shard+"x"))
		}()
		go func() {
			defer wg.Done()
			errs[1] = s.BeginOperation(ctx, Operation{Shard: shard, Kind: "switchover", WorkflowID: "switchover-" + shard, RunID: "r"})
		}()
		wg.Wait()
		passed := 0
		for _, err := range errs {
			if err == nil {
				passed++
			} else if !conflict(err) {
				t.Fatal(err)
			}
		}
		ops, _ := s.ListOperations(ctx, shard)
		if passed != 1 || len(ops) != 1 {
			t.Fatalf("race %d: %d passed (%v), records %+v", i, passed, errs, ops)
		}
	}
}
