package store

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/tesseradb/tessera/pgerr"
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
//
// A data movement's cutover (SwitchTraffic, ReverseTraffic) records
// itself too, as kind "cutover", on every shard it fences or buffers,
// and some kinds exclude others (excludedBy): a switchover does not begin
// while a cutover holds the shard, nor a cutover while a switchover or a
// failover does. A failover is never refused: a dead primary must be
// replaced; the cutover it meets backs off instead. The check and the
// write are one etcd transaction, so two operations that begin at once
// cannot both pass.

// Operation is one operation workflow's record.
type Operation struct {
	Shard string `json:"shard"`
	// Kind is "switchover", "failover", "repair", "rejoin" or "cutover".
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

// excludedBy lists the kinds of other workflows' records that keep an
// operation of kind from beginning on the same shard.
func excludedBy(kind string) []string {
	switch kind {
	case "switchover":
		return []string{"cutover"}
	case "cutover":
		return []string{"switchover", "failover"}
	}
	return nil
}

// BeginOperation records op, unless another workflow's record on the
// shard excludes it (excludedBy): then it returns an error with SQLSTATE
// 55006 (object in use) naming that record, and writes nothing. Doing it
// again (a retried activity) rewrites the same record.
func (s *Store) BeginOperation(ctx context.Context, op Operation) error {
	return s.BeginOperations(ctx, []Operation{op})
}

// BeginOperations records ops (a cutover's, one per shard) all or none,
// each subject to BeginOperation's exclusion.
func (s *Store) BeginOperations(ctx context.Context, ops []Operation) error {
	for _, op := range ops {
		if op.Shard == "" || op.WorkflowID == "" || op.Kind == "" {
			return fmt.Errorf("operation record: shard, kind and workflow id are required")
		}
	}
	for {
		var cmps []clientv3.Cmp
		var puts []clientv3.Op
		for _, op := range ops {
			if excl := excludedBy(op.Kind); len(excl) > 0 {
				resp, err := s.cli.Get(ctx, s.operationsPrefix(op.Shard), clientv3.WithPrefix())
				if err != nil {
					return fmt.Errorf("reading operations of shard %s: %w", op.Shard, err)
				}
				for _, kv := range resp.Kvs {
					var other Operation
					if json.Unmarshal(kv.Value, &other) != nil || other.WorkflowID == op.WorkflowID || !slices.Contains(excl, other.Kind) {
						continue
					}
					return pgerr.New(pgerr.ObjectInUse, "shard %s: the %s of %s (since %s) excludes a %s by %s: retry once it has ended",
						op.Shard, other.Kind, other.WorkflowID, other.Since.UTC().Format(time.RFC3339), op.Kind, op.WorkflowID)
				}
				// Any record written on the shard since the read (a new
				// key has a later revision) fails the transaction.
				cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.operationsPrefix(op.Shard)).WithPrefix(), "<", resp.Header.Revision+1))
			}
			doc, err := json.Marshal(op)
			if err != nil {
				return err
			}
			puts = append(puts, clientv3.OpPut(s.OperationKey(op.Shard, op.WorkflowID), string(doc)))
		}
		resp, err := s.cli.Txn(ctx).If(cmps...).Then(puts...).Commit()
		if err != nil {
			return fmt.Errorf("recording operation %s on shard %s: %w", ops[0].WorkflowID, ops[0].Shard, err)
		}
		if resp.Succeeded {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
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
