package store

import (
	"context"
	"testing"
	"time"
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
