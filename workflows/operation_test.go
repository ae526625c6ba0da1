package workflows

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"

	"github.com/tesseradb/tessera/activities"
	"github.com/tesseradb/tessera/pgerr"
)

// TestOperationsRecordThemselves: every operation workflow records itself
// (BeginOperation, of its kind) before its first step on the shard, and
// removes the record when it ends, succeeding or failing, so that admins
// see it whatever workflow id started it.
func TestOperationsRecordThemselves(t *testing.T) {
	cases := []struct {
		name, workflow, kind string
		in                   any
		fail                 string
	}{
		{"switchover", SwitchoverName, OpSwitchover, SwitchoverInput{Shard: "s1"}, ""},
		{"failing switchover", SwitchoverName, OpSwitchover, SwitchoverInput{Shard: "s1"}, "PromoteInstance"},
		{"failover", FailoverName, OpFailover, FailoverInput{Shard: "s1", Force: true}, ""},
		{"repair", RepairShardName, OpRepair, RepairInput{Shard: "s1"}, ""},
		{"rejoin", RejoinName, OpRejoin, RejoinInput{Shard: "s1", Instance: "b"}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := healthyShard(t)
			if c.fail != "" {
				f.fail[c.fail] = activities.Refuse("55000", "fails")
			}
			f.env.ExecuteWorkflow(c.workflow, c.in)
			if !f.env.IsWorkflowCompleted() {
				t.Fatal("the workflow did not complete")
			}
			if len(f.calls) < 2 || f.calls[0] != "BeginOperation "+c.kind || f.calls[len(f.calls)-1] != "EndOperation "+c.kind {
				t.Errorf("calls %q: want BeginOperation %s first and EndOperation %s last", f.calls, c.kind, c.kind)
			}
			if n := len(slices.DeleteFunc(slices.Clone(f.calls), func(s string) bool { return s != "EndOperation "+c.kind })); n != 1 {
				t.Errorf("EndOperation ran %d times", n)
			}
		})
	}
}

// TestSwitchoverWaitsForACutoverThenRefuses: while a cutover holds the
// shard, the switchover's record is refused (55006, retried): the
// switchover retries it for a bounded time, then fails with that
// SQLSTATE having done nothing to the shard, and leaves no record.
func TestSwitchoverWaitsForACutoverThenRefuses(t *testing.T) {
	f := healthyShard(t)
	f.fail["BeginOperation"] = temporal.NewApplicationError("shard s1: the cutover of reshard-shop-data excludes a switchover", pgerr.ObjectInUse)
	f.env.ExecuteWorkflow(SwitchoverName, SwitchoverInput{Shard: "s1"})
	err := f.env.GetWorkflowError()
	var appErr *temporal.ApplicationError
	if !errors.As(err, &appErr) || appErr.Type() != pgerr.ObjectInUse || !strings.Contains(err.Error(), "reshard-shop-data") {
		t.Fatalf("switchover during a cutover: %v, want 55006 naming the cutover", err)
	}
	begins := f.called("BeginOperation")
	if len(begins) != int(awaitCutover.attempts) || len(begins) != len(f.calls) {
		t.Fatalf("calls %q: want only %d attempts of BeginOperation", f.calls, awaitCutover.attempts)
	}
}
