package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"

	"go.temporal.io/sdk/workflow"
)

// MoveTables' names: the workflow type and its planning activity. Its
// queries, Cancel signal and SwitchTraffic, ReverseTraffic and Complete
// updates are Reshard's, and so are the activities after the plan.
const (
	MoveTablesName         = "MoveTables"
	PlanMoveTablesActivity = "PlanMoveTables"
	// ImportSourceShard names an import's external Postgres where a plan
	// names shards, and the shard group that holds the imported tables in
	// the import's source topology (what its reverse streams route by).
	ImportSourceShard = "import_source"
)

// MoveTablesID is the workflow id of a move of tables into a shard group:
// one at a time per target group.
func MoveTablesID(database, targetGroup string) string {
	return "movetables-" + database + "-" + targetGroup
}

// MoveTablesKey is the short name of a MoveTables' objects on every
// instance: "mt" and 16 hex digits, safe in slot, publication and origin
// names.
func MoveTablesKey(workflowID string) string {
	sum := sha256.Sum256([]byte(workflowID))
	return "mt" + hex.EncodeToString(sum[:8])
}

// MoveTablesInput asks for tables to move to another shard group, e.g.
//
//	{"database":"store","tables":["public.orders"],"target_shard_group":"archive"}
type MoveTablesInput struct {
	Database string `json:"database"`
	// Tables are schema.name (a bare name is in schema public), all in
	// one source shard group.
	Tables           []string `json:"tables"`
	TargetShardGroup string   `json:"target_shard_group"`
	// ShardIndex routes the tables in the target group; empty means the
	// group's default shard index (none is needed by a single-shard
	// group).
	ShardIndex string `json:"shard_index,omitempty"`
	// Source, when set, names a plain Postgres outside the cluster to
	// import the tables from (docs/operations.md, MoveTables).
	Source *ExternalSource `json:"source,omitempty"`
	// MaxLagBytes: as ReshardInput's.
	MaxLagBytes int64 `json:"max_lag_bytes,omitempty"`
	// CopyBatchRows: as ReshardInput's.
	CopyBatchRows int `json:"copy_batch_rows,omitempty"`
	// Resume, set only by the workflow itself when it continues as new.
	Resume *ReshardResume `json:"resume,omitempty"`
}

// ExternalSource is where an import reads from.
type ExternalSource struct {
	// ConnSecret is the path of a file, on the workers, holding the
	// external Postgres' connection string: never the string itself.
	ConnSecret string `json:"conn_secret"`
}

// PlanMoveTablesInput is PlanMoveTables' input.
type PlanMoveTablesInput struct {
	WorkflowID string          `json:"workflow_id"`
	Input      MoveTablesInput `json:"input"`
}

// MoveTables moves tables from their shard group to another: the run of
// Reshard (copy, catch-up, VDiff, ready_for_cutover, SwitchTraffic,
// ReverseTraffic, Complete, Cancel) on a plan whose sources are the
// tables' group's shards, whose targets are the target group's, and
// whose target topology places the tables in the target group.
// SwitchTraffic moves the tables' placements in the topology; Complete
// drops the tables from the sources. With a Source it imports the tables
// from a Postgres outside the cluster instead: the source is that server,
// SwitchTraffic fences its tables and gives them their entry in the
// target group, ReverseTraffic is refused, and Complete leaves its tables.
func MoveTables(ctx workflow.Context, in MoveTablesInput) (ReshardResult, error) {
	resume := in.Resume
	in.Resume = nil
	return runMovement(ctx, movement{
		name:         MoveTablesName,
		title:        in.Summary(),
		maxLagBytes:  in.MaxLagBytes,
		resume:       resume,
		planActivity: PlanMoveTablesActivity,
		planInput:    PlanMoveTablesInput{WorkflowID: workflow.GetInfo(ctx).WorkflowExecution.ID, Input: in},
		next: func(r *ReshardResume) any {
			next := in
			next.Resume = r
			return next
		},
	})
}

// Summary is the one line the UI lists a MoveTables' run with.
func (in MoveTablesInput) Summary() string {
	s := "MoveTables " + strings.Join(in.Tables, ", ") + " of " + in.Database + " to shard group " + in.TargetShardGroup
	if in.Source != nil {
		s += " from an external Postgres"
	}
	return s
}
