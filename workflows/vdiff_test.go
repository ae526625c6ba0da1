package workflows

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"
)

func newVDiffEnv() *testsuite.TestWorkflowEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(VDiff, workflow.RegisterOptions{Name: VDiffName})
	return env
}

// Named by database and shard group, the VDiff asks the group's reshard
// (none runs here), then the MoveTables into the group, and returns the
// movement's reply as its report.
func TestVDiffWorkflowFindsTheMovementAndReturnsItsReport(t *testing.T) {
	env := newVDiffEnv()
	env.OnSignalExternalWorkflow(mock.Anything, "reshard-shop-data", "", VDiffRequestSignal, mock.Anything).
		Return(errors.New("workflow not found"))
	var asked VDiffRequest
	env.OnSignalExternalWorkflow(mock.Anything, "movetables-shop-data", "", VDiffRequestSignal, mock.Anything).
		Return(func(ns, id, run, name string, arg any) error { asked = arg.(VDiffRequest); return nil })
	result := &DiffTablesResult{Done: true, Differences: 2, Reports: map[string]json.RawMessage{"public.orders": json.RawMessage(`{"done":true}`)}}
	var during VDiffReport
	var details string
	env.RegisterDelayedCallback(func() {
		v, err := env.QueryWorkflow(ReportQuery)
		if err == nil {
			err = v.Get(&during)
		}
		if err != nil {
			t.Error(err)
		}
		env.SignalWorkflow(VDiffReplySignal, VDiffReply{Phase: PhaseSwitched, Reverse: true, Result: result})
	}, time.Minute)
	env.ExecuteWorkflow(VDiff, VDiffInput{Database: "shop", ShardGroup: "data"})
	var rep VDiffReport
	if err := env.GetWorkflowResult(&rep); err != nil {
		t.Fatal(err)
	}
	if asked.WorkflowID != "default-test-workflow-id" || asked.RunID == "" {
		t.Fatalf("request %+v", asked)
	}
	if during.Phase != PhaseDiffing || during.Movement != "movetables-shop-data" || during.Result != nil {
		t.Fatalf("report while diffing %+v", during)
	}
	if rep.Phase != PhaseDone || !rep.Reverse || rep.MovementPhase != PhaseSwitched || rep.Result == nil || rep.Result.Differences != 2 {
		t.Fatalf("report %+v", rep)
	}
	details = currentDetails(t, env)
	if !strings.Contains(details, "**VDiff of the movement of shop.data**: done") || !strings.Contains(details, "2 differences over 1 tables") {
		t.Fatalf("details %q", details)
	}
}

// A refusal from the movement fails the VDiff with its SQLSTATE; no
// movement at all is 42704; an input naming nothing is 22023.
func TestVDiffWorkflowFailures(t *testing.T) {
	env := newVDiffEnv()
	env.OnSignalExternalWorkflow(mock.Anything, "reshard-shop-data", "", VDiffRequestSignal, mock.Anything).Return(nil)
	env.RegisterDelayedCallback(func() {
		env.SignalWorkflow(VDiffReplySignal, VDiffReply{Phase: PhaseCopying, Error: "a VDiff needs phase ready_for_cutover", SQLState: "55000"})
	}, time.Minute)
	env.ExecuteWorkflow(VDiff, VDiffInput{WorkflowID: "reshard-shop-data"})
	if got := sqlStateOf(env.GetWorkflowError()); got != "55000" {
		t.Fatalf("refused: %v", env.GetWorkflowError())
	}
	v, err := env.QueryWorkflow(ReportQuery)
	var rep VDiffReport
	if err == nil {
		err = v.Get(&rep)
	}
	if err != nil || rep.Phase != PhaseFailed || !strings.Contains(rep.Error, "ready_for_cutover") {
		t.Fatalf("report %+v, %v", rep, err)
	}

	env = newVDiffEnv()
	env.OnSignalExternalWorkflow(mock.Anything, mock.Anything, "", VDiffRequestSignal, mock.Anything).Return(errors.New("workflow not found"))
	env.ExecuteWorkflow(VDiff, VDiffInput{Database: "shop", ShardGroup: "data"})
	if got := sqlStateOf(env.GetWorkflowError()); got != "42704" {
		t.Fatalf("no movement: %v", env.GetWorkflowError())
	}

	env = newVDiffEnv()
	env.ExecuteWorkflow(VDiff, VDiffInput{Database: "shop"})
	if got := sqlStateOf(env.GetWorkflowError()); got != "22023" {
		t.Fatalf("no group: %v", env.GetWorkflowError())
	}
}
