package workflows

import "fmt"

// The VDiff workflow's names and plain-JSON types: it asks a running data
// movement (Reshard or MoveTables) for a VDiff at a consistent point and
// keeps the report. A workflow cannot send an update to another, so the
// two talk by signals: VDiffRequestSignal to the movement, which runs the
// diff as its VDiff update would and answers with VDiffReplySignal.
const (
	VDiffName = "VDiff"
	// VDiffUpdate asks a movement for a VDiff now and returns its
	// DiffTablesResult: allowed in phases ready_for_cutover (sources
	// against targets) and switched (the reverse direction: the targets,
	// which now serve, against the sources).
	VDiffUpdate = "VDiff"
	// VDiffRequestSignal is VDiffUpdate by signal, carrying a
	// VDiffRequest: the movement answers with VDiffReplySignal.
	VDiffRequestSignal = "VDiffRequest"
	// VDiffReplySignal carries a VDiffReply to the VDiff workflow.
	VDiffReplySignal = "VDiffReply"
	// ReportQuery answers the VDiff workflow's VDiffReport.
	ReportQuery = "report"
)

// The VDiff workflow's phases (TesseraPhase); done and failed end it.
const (
	PhaseRequesting = "requesting"
	// PhaseDiffing (reshard_types.go) while the movement diffs.
)

// VDiffID is the workflow id of a VDiff of a movement: one at a time.
func VDiffID(movementID string) string { return "vdiff-" + movementID }

// VDiffInput names the movement to diff: its workflow id, or its database
// and shard group as `tessera vdiff` does (a reshard of the group, else a
// MoveTables into it), e.g.
//
//	{"workflow_id":"reshard-shop-data"}
//	{"database":"shop","shard_group":"data"}
type VDiffInput struct {
	WorkflowID string `json:"workflow_id,omitempty"`
	Database   string `json:"database,omitempty"`
	ShardGroup string `json:"shard_group,omitempty"`
}

// candidates are the workflow ids the input may name, in the order tried.
func (in VDiffInput) candidates() []string {
	if in.WorkflowID != "" {
		return []string{in.WorkflowID}
	}
	return []string{ReshardID(in.Database, in.ShardGroup), MoveTablesID(in.Database, in.ShardGroup)}
}

// Summary is the one line the UI lists a VDiff's run with.
func (in VDiffInput) Summary() string {
	if in.WorkflowID != "" {
		return "VDiff of " + in.WorkflowID
	}
	return fmt.Sprintf("VDiff of the movement of %s.%s", in.Database, in.ShardGroup)
}

// VDiffRequest asks a movement for a VDiff; the reply goes to this run.
type VDiffRequest struct {
	WorkflowID string `json:"workflow_id"`
	RunID      string `json:"run_id,omitempty"`
}

// VDiffReply is a movement's answer to a VDiffRequest: the result, or why
// there is none with its SQLSTATE.
type VDiffReply struct {
	// Phase is the movement's when it diffed; Reverse: it diffed the
	// reverse direction (targets as sources), the targets serving.
	Phase    string            `json:"phase"`
	Reverse  bool              `json:"reverse,omitempty"`
	Result   *DiffTablesResult `json:"result,omitempty"`
	Error    string            `json:"error,omitempty"`
	SQLState string            `json:"sqlstate,omitempty"`
}

// VDiffReport is the VDiff workflow's result and ReportQuery's answer.
type VDiffReport struct {
	// Movement is the workflow id of the movement diffed.
	Movement string `json:"movement,omitempty"`
	Phase    string `json:"phase"`
	// MovementPhase and Reverse are the reply's.
	MovementPhase string            `json:"movement_phase,omitempty"`
	Reverse       bool              `json:"reverse,omitempty"`
	Result        *DiffTablesResult `json:"result,omitempty"`
	Error         string            `json:"error,omitempty"`
}
