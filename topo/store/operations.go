package store

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Operations under way. Each operation workflow (switchover, failover,
// repair, rejoin) records itself under
// /tessera/<cluster>/operations/<shard>/<workflow id> when it begins and
// removes the record when it ends, whatever started it: an operator, an
// admin, or a Temporal schedule, which gives every run an id of its own
// (switchover-<shard>-<time>). An admin deciding whether it may start an
// operation reads these records instead of guessing workflow ids. A
// record whose workflow died without removing it (its workflow was
// terminated) is recognised by asking Temporal about its run.

// Operation is one operation workflow's record.
type Operation struct {
	Shard string `json:"shard"`
	// Kind is "switchover", "failover", "repair" or "rejoin".
	Kind       string    `json:"kind"`
	WorkflowID string    `json:"workflow_id"`
	RunID      string    `json:"run_id"`
	Since      time.Time `json:"since"`
	// Revision is the record's etcd modification revision (not stored).
	Revision int64 `json:"-"`
}

func (s *Store) operationsPrefix(shard string) string { return s.prefix + "operations/" + shard + "/" }

// OperationKey is the etcd key of a workflow's operation record.
func (s *Store) OperationKey(shard, workflowID string) string {
	return s.operationsPrefix(shard) + workflowID
}

// BeginOperation records op. Doing it again (a retried activity) rewrites
// the same record.
func (s *Store) BeginOperation(ctx context.Context, op Operation) error {
	if op.Shard == "" || op.WorkflowID == "" || op.Kind == "" {
		return fmt.Errorf("operation record: shard, kind and workflow id are required")
	}
	doc, err := json.Marshal(op)
	if err != nil {
		return err
	}
	if _, err := s.cli.Put(ctx, s.OperationKey(op.Shard, op.WorkflowID), string(doc)); err != nil {
		return fmt.Errorf("recording operation %s on shard %s: %w", op.WorkflowID, op.Shard, err)
	}
	return nil
}

// EndOperation removes the record of the workflow run, if it is that
// run's (a later run of the same id may have replaced it).
func (s *Store) EndOperation(ctx context.Context, shard, workflowID, runID string) error {
	ops, err := s.ListOperations(ctx, shard)
	if err != nil {
		return err
	}
	for _, op := range ops {
		if op.WorkflowID == workflowID && op.RunID == runID {
			return s.DeleteOperation(ctx, op)
		}
	}
	return nil
}

// DeleteOperation removes op's record unless it changed since it was read.
func (s *Store) DeleteOperation(ctx context.Context, op Operation) error {
	key := s.OperationKey(op.Shard, op.WorkflowID)
	_, err := s.cli.Txn(ctx).
		If(clientv3.Compare(clientv3.ModRevision(key), "=", op.Revision)).
		Then(clientv3.OpDelete(key)).
		Commit()
	if err != nil {
		return fmt.Errorf("removing operation %s of shard %s: %w", op.WorkflowID, op.Shard, err)
	}
	return nil
}

// ListOperations returns the shard's operation records, by workflow id.
func (s *Store) ListOperations(ctx context.Context, shard string) ([]Operation, error) {
	if shard == "" {
		return nil, fmt.Errorf("shard uid is empty")
	}
	resp, err := s.cli.Get(ctx, s.operationsPrefix(shard), clientv3.WithPrefix(), clientv3.WithSort(clientv3.SortByKey, clientv3.SortAscend))
	if err != nil {
		return nil, fmt.Errorf("reading operations of shard %s: %w", shard, err)
	}
	out := make([]Operation, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var op Operation
		if json.Unmarshal(kv.Value, &op) != nil || s.OperationKey(op.Shard, op.WorkflowID) != string(kv.Key) {
			continue // not a record this code wrote
		}
		op.Revision = kv.ModRevision
		out = append(out, op)
	}
	return out, nil
}
