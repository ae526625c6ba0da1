package workflows

// The shadow path's activities, inputs and results (package onlineddl
// implements them). A statement that rewrites its table runs, on each
// shard that holds the table, against a shadow table that a consistent
// copy fills and the change stream keeps current, swapped in by rename.

// The shadow path's activities, by the names the Temporal UI shows.
const (
	PrepareShadowActivity  = "PrepareShadow"
	CopyShadowActivity     = "CopyShadow"
	SwapShadowActivity     = "SwapShadow"
	StreamShadowActivity   = "StreamShadow"
	RevertShadowActivity   = "RevertShadow"
	CompleteShadowActivity = "CompleteShadow"
	CancelShadowActivity   = "CancelShadow"
)

// States of a shard's shadow table, as _tessera.shadow_migrations records
// them on the shard.
const (
	ShadowPrepared  = "prepared"  // the shadow exists with the new definition
	ShadowCopied    = "copied"    // the snapshot's rows are in it
	ShadowSwapped   = "swapped"   // it has the table's name; the old one is kept current
	ShadowReverted  = "reverted"  // the old table is back; the shadow is gone
	ShadowCompleted = "completed" // the old table and the streams are gone
	ShadowCancelled = "cancelled" // nothing is left of the migration
)

// OnlineDDL's updates for a migration on the shadow path, once every shard
// has swapped: Complete drops the old tables, Revert swaps them back.
const (
	OnlineDDLCompleteUpdate = "Complete"
	OnlineDDLRevertUpdate   = "Revert"
)

// ShadowInput is one shard's step of a migration on the shadow path.
type ShadowInput struct {
	MigrationID string        `json:"migration_id"`
	Database    string        `json:"database"`
	Shard       string        `json:"shard"`
	SQL         string        `json:"sql"`
	Plan        OnlineDDLPlan `json:"plan"`
	// LockTimeoutMillis bounds the swap's wait for its lock on the table.
	LockTimeoutMillis int `json:"lock_timeout_ms"`
	// BatchRows bounds a batch of the copy; 0 means 10000.
	BatchRows int `json:"batch_rows,omitempty"`
	// BufferMillis is how long routers hold the table's statements around
	// a swap at most (a table buffer); 0 sets none.
	BufferMillis int `json:"buffer_ms,omitempty"`
}

// ShadowResult says what a shadow-path activity did on its shard.
type ShadowResult struct {
	// State is the shard's shadow state afterwards.
	State string `json:"state"`
	// AlreadyDone: an earlier attempt had done the step.
	AlreadyDone bool `json:"already_done,omitempty"`
	// Rows is how many rows the copy wrote (this attempt).
	Rows int64 `json:"rows,omitempty"`
	// LockMillis is how long the swap held the table's ACCESS EXCLUSIVE
	// lock; CatchUpMillis the part of it spent waiting for the stream to
	// apply the marker.
	LockMillis    float64 `json:"lock_ms,omitempty"`
	CatchUpMillis float64 `json:"catch_up_ms,omitempty"`
	// Moved names the objects a swap moved to the table now in place
	// (views, foreign keys, sequences, triggers, grants, publications).
	Moved []string `json:"moved,omitempty"`
}
