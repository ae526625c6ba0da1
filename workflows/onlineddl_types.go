package workflows

import "fmt"

// The OnlineDDL workflow's inputs, plan, per-shard states and results are
// plain JSON, like Reshard's: its activities (package onlineddl) take and
// return these types, and the classifier (package ddl) stays out of
// workflow code, so a change to the classifier cannot break the replay of
// a running migration.

// OnlineDDL's and SchemaCheck's names: workflow types, queries, update.
const (
	OnlineDDLName   = "OnlineDDL"
	SchemaCheckName = "SchemaCheck"
	// OnlineDDLProgressQuery answers an OnlineDDLProgress: the plan and
	// every shard's state.
	OnlineDDLProgressQuery = "progress"
	// SchemaCheckQuery answers the SchemaCheckResult of the check run after
	// the change reached every shard (nil before).
	SchemaCheckQuery = "schema_check"
	// OnlineDDLCancelUpdate cancels a migration before any shard ran it;
	// afterwards it is refused: the cluster converges instead.
	OnlineDDLCancelUpdate = "Cancel"
)

// OnlineDDL's activities, by the names the Temporal UI shows.
const (
	PlanOnlineDDLActivity = "PlanOnlineDDL"
	ApplyDDLActivity      = "ApplyDDL"
	CheckSchemaActivity   = "CheckSchema"
)

// Paths of a classified statement (package ddl's, as strings).
const (
	PathDirect  = "direct"
	PathShadow  = "shadow"
	PathRefused = "refused"
)

// Phases of an OnlineDDL run, as TesseraPhase and the progress query show
// them; done, failed and cancelled end it.
const (
	PhaseClassifying = "classifying"
	PhaseApplying    = "applying"
	PhaseChecking    = "checking_schema"
)

// States of one shard in a migration.
const (
	ShardPending = "pending"
	ShardRunning = "running"
	ShardDone    = "done"
	ShardFailed  = "failed"
)

// OnlineDDLID is the workflow id of migrations of one table (or, for DROP
// INDEX, one index) of a database: Temporal runs one workflow per id at a
// time, so migrations of the same table run one after the other (the CLI
// waits for the running one before starting the next), while different
// tables' run at once.
func OnlineDDLID(database, schema, object string) string {
	if schema == "" {
		schema = "public"
	}
	return fmt.Sprintf("onlineddl-%s-%s.%s", database, schema, object)
}

// OnlineDDLInput asks for one schema change on every shard that holds the
// table, e.g. {"database":"store","sql":"ALTER TABLE orders ADD COLUMN qty int NOT NULL DEFAULT 0"}.
type OnlineDDLInput struct {
	Database string `json:"database"`
	SQL      string `json:"sql"`
	// Shards, when given, limits the migration to these shards (each must
	// be in the topology); default: every shard that holds the table.
	Shards []string `json:"shards,omitempty"`
	// LockTimeoutMillis bounds each attempt's wait for its lock on a
	// shard; 0 means 1000. A short wait keeps a blocked ALTER from
	// queueing every other query of the table behind it.
	LockTimeoutMillis int `json:"lock_timeout_ms,omitempty"`
	// HoldForRevert, on the shadow path, keeps the old tables current
	// after the swap until the Complete update drops them or the Revert
	// update swaps them back; without it they are dropped at once.
	HoldForRevert bool `json:"hold_for_revert,omitempty"`
	// Resume, set only by the workflow itself when it continues as new
	// (a shard retried for hours), carries the plan and the shards'
	// states.
	Resume *OnlineDDLResume `json:"resume,omitempty"`
}

// OnlineDDLResume is the state a migration continues as new with. The
// migration id stays the first run's: ApplyDDL's record of a shard's
// change names it.
type OnlineDDLResume struct {
	MigrationID string          `json:"migration_id"`
	Plan        OnlineDDLPlan   `json:"plan"`
	Shards      []ShardDDLState `json:"shards"`
	// ShadowStage, on the shadow path, is the stage the migration goes on
	// with (copy, swap, hold, complete, revert); each shard's shadow state
	// in Shards says which shards have done it. Empty on the direct path.
	ShadowStage string `json:"shadow_stage,omitempty"`
}

// Summary is the one line the UI lists a migration's run with.
func (in OnlineDDLInput) Summary() string {
	sql := in.SQL
	if len(sql) > 120 {
		sql = sql[:117] + "..."
	}
	return fmt.Sprintf("OnlineDDL on %s: %s", in.Database, sql)
}

// PlanOnlineDDLInput is PlanOnlineDDL's input.
type PlanOnlineDDLInput struct {
	WorkflowID string         `json:"workflow_id"`
	Input      OnlineDDLInput `json:"input"`
}

// OnlineDDLPlan is what PlanOnlineDDL found: the statement's path and why,
// the table, and the shards it runs on (authoritative shard first).
type OnlineDDLPlan struct {
	Path   string `json:"path"`
	Reason string `json:"reason"`
	// Execution is package ddl's: "transaction",
	// "create_index_concurrently" or "drop_index_concurrently".
	Execution string   `json:"execution,omitempty"`
	Schema    string   `json:"schema,omitempty"`
	Table     string   `json:"table,omitempty"`
	Index     string   `json:"index,omitempty"`
	Shards    []string `json:"shards,omitempty"`
}

// ApplyDDLInput runs a migration's statement on one shard.
type ApplyDDLInput struct {
	MigrationID       string        `json:"migration_id"`
	Database          string        `json:"database"`
	Shard             string        `json:"shard"`
	SQL               string        `json:"sql"`
	Plan              OnlineDDLPlan `json:"plan"`
	LockTimeoutMillis int           `json:"lock_timeout_ms"`
}

// ApplyDDLResult says what ApplyDDL did on its shard.
type ApplyDDLResult struct {
	// AlreadyApplied: an earlier attempt had made the change.
	AlreadyApplied bool `json:"already_applied,omitempty"`
	// DroppedInvalidIndex: an INVALID index an earlier failed build left
	// was dropped first.
	DroppedInvalidIndex bool `json:"dropped_invalid_index,omitempty"`
	// Millis is how long the statement itself ran.
	Millis float64 `json:"millis"`
}

// ShardDDLState is one shard's state in a migration.
type ShardDDLState struct {
	Shard     string  `json:"shard"`
	State     string  `json:"state"`
	Attempts  int     `json:"attempts"`
	LastError string  `json:"last_error,omitempty"`
	Millis    float64 `json:"millis,omitempty"`
	// AlreadyApplied and DroppedInvalidIndex are ApplyDDLResult's.
	AlreadyApplied      bool `json:"already_applied,omitempty"`
	DroppedInvalidIndex bool `json:"dropped_invalid_index,omitempty"`
	// Shadow is the shard's shadow-table state (ShadowPrepared...) on the
	// shadow path, Rows the rows its copy wrote; Millis is then how long
	// the swap held the table's lock.
	Shadow string `json:"shadow,omitempty"`
	Rows   int64  `json:"rows,omitempty"`
}

// OnlineDDLProgress answers OnlineDDLProgressQuery.
type OnlineDDLProgress struct {
	Phase       string             `json:"phase"`
	Plan        *OnlineDDLPlan     `json:"plan,omitempty"`
	Shards      []ShardDDLState    `json:"shards"`
	SchemaCheck *SchemaCheckResult `json:"schema_check,omitempty"`
	Error       string             `json:"error,omitempty"`
}

// OnlineDDLResult is how a migration ended.
type OnlineDDLResult struct {
	OnlineDDLProgress
	Steps []string `json:"steps"`
}

// SchemaCheckInput asks which tables of a database differ between the
// shards that hold them.
type SchemaCheckInput struct {
	Database string `json:"database"`
	// Shards to compare; default every shard of the topology, the
	// authoritative one first (the reference each table is compared with
	// is the first shard that holds it).
	Shards []string `json:"shards,omitempty"`
}

// Summary is the one line the UI lists a schema check's run with.
func (in SchemaCheckInput) Summary() string { return "Schema check of " + in.Database }

// SchemaDifference is one way a table's definition on a shard differs from
// the reference shard's.
type SchemaDifference struct {
	Table     string `json:"table"`
	Shard     string `json:"shard"`
	Reference string `json:"reference"`
	What      string `json:"what"`
}

// SchemaCheckResult is a schema check's report.
type SchemaCheckResult struct {
	Database    string             `json:"database"`
	Shards      []string           `json:"shards"`
	Tables      int                `json:"tables"`
	Differences []SchemaDifference `json:"differences"`
}
