package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"slices"
	"time"

	"go.temporal.io/sdk/temporal"
)

// The Reshard workflow's inputs, plan and results are plain JSON: admins
// write ReshardInput by hand (docs/operations.md), and the Replicator's
// activities (package replicator/actions) take and return these types, so
// this package needs nothing of the replicator's internals.

// Reshard's names: the workflow type, its queries, signals and update.
const (
	ReshardName = "Reshard"
	// PhaseQuery answers the phase as a string (see the Phase constants).
	PhaseQuery = "phase"
	// ProgressQuery answers a ReshardProgress.
	ProgressQuery = "progress"
	// CancelSignal stops the streams and drops, on every instance, the
	// slots, publications, origins and progress rows the reshard created.
	CancelSignal = "Cancel"
	// SwitchTrafficUpdate moves the group's writes (and reads) to the
	// targets: allowed in phase ready_for_cutover, it returns once the
	// topology is switched, or with why nothing changed. Its optional
	// TrafficInput {"traffic":"reads"} moves only replica reads, ahead
	// of the writes (not an import's).
	SwitchTrafficUpdate = "SwitchTraffic"
	// ReverseTrafficUpdate moves a switched group back to the sources,
	// the cutover's mirror: the forward streams run again from their
	// kept slots, and SwitchTraffic may be asked again. With
	// {"traffic":"reads"} it puts replica reads switched alone back.
	ReverseTrafficUpdate = "ReverseTraffic"
	// CompleteUpdate ends a switched reshard: it stops the reverse
	// streams, drops everything the reshard made on every instance and the
	// moved rows from the sources.
	CompleteUpdate = "Complete"
)

// Reshard's activities, by the names the Temporal UI shows.
const (
	PlanReshardActivity    = "PlanReshard"
	CopyTablesActivity     = "CopyTables"
	StreamChangesActivity  = "StreamChanges"
	StreamLagActivity      = "StreamLag"
	DiffTablesActivity     = "DiffTables"
	CleanupReshardActivity = "CleanupReshard"
	// ResetMovementActivity undoes a movement before its cutover, so it
	// can start again from new snapshots after a source failed over.
	ResetMovementActivity = "ResetMovement"
	// The cutover's steps, in the order SwitchTraffic runs them.
	CheckCutoverActivity     = "CheckCutover"
	SetTableBufferActivity   = "SetTableBuffer"
	FenceSourcesActivity     = "FenceSources"
	SetSequencesActivity     = "SetSequences"
	PrepareReverseActivity   = "PrepareReverse"
	SwitchTopologyActivity   = "SwitchTopology"
	WaitRoutersActivity      = "WaitRouters"
	ClearTableBufferActivity = "ClearTableBuffer"
	// UnfenceSources undoes FenceSources when a cutover stops before its
	// topology switch.
	UnfenceSourcesActivity = "UnfenceSources"
	// CompleteReshard is Complete's work.
	CompleteReshardActivity = "CompleteReshard"
	// SwitchReplicaReads moves the group's replica reads to the targets
	// (a SwitchTraffic of reads) or back (ReverseTraffic of reads,
	// Cancel), by the group's replica key ranges in the topology.
	SwitchReplicaReadsActivity = "SwitchReplicaReads"
)

// Phases of a reshard, in order; cancelled and failed end it early.
const (
	PhaseValidating      = "validating"
	PhaseCopying         = "copying"
	PhaseCatchingUp      = "catching_up"
	PhaseDiffing         = "diffing"
	PhaseReadyForCutover = "ready_for_cutover"
	// PhaseSwitching: SwitchTraffic runs; before its topology switch it
	// goes back to ready_for_cutover if a step fails.
	PhaseSwitching = "switching"
	// PhaseSwitched: the targets serve the group, reverse streams carry
	// their writes back to the sources; Complete ends the reshard.
	PhaseSwitched   = "switched"
	PhaseCompleted  = "completed"
	PhaseCancelling = "cancelling"
	PhaseCancelled  = "cancelled"
)

// The traffic SwitchTraffic and ReverseTraffic move (TrafficInput).
const (
	// TrafficWrites, the default, moves writes and every read.
	TrafficWrites = "writes"
	// TrafficReads moves only replica reads (sessions with
	// tessera.target = replica), as Vitess switches replica and rdonly
	// reads before primary writes: the targets serve them while the
	// sources still take every write.
	TrafficReads = "reads"
)

// TrafficInput is SwitchTraffic's and ReverseTraffic's optional argument,
// e.g. {"traffic":"reads"}; none, or an empty traffic, means writes.
type TrafficInput struct {
	Traffic string `json:"traffic,omitempty"`
}

// Reads says whether only replica reads move.
func (in TrafficInput) Reads() bool { return in.Traffic == TrafficReads }

// ReadsSwitch records a SwitchTraffic of reads: replica reads are on the
// targets, primary reads and writes still on the sources.
type ReadsSwitch struct {
	// Revision is the topology revision that set the group's replica
	// key ranges.
	Revision int64     `json:"revision"`
	Switched time.Time `json:"switched"`
	// RoutersWaiting are the routers that had not applied Revision when
	// the switch stopped waiting for them.
	RoutersWaiting []string `json:"routers_waiting,omitempty"`
}

// ReshardID is the workflow id of a reshard of a shard group: one at a
// time per group.
func ReshardID(database, group string) string { return "reshard-" + database + "-" + group }

// ReshardInput asks for a shard group's key ranges to move to a new set of
// shards, e.g.
//
//	{"database":"store","shard_group":"customer_data",
//	 "target_key_ranges":[{"shard_uid":"c3","end":"40"},{"shard_uid":"c4","start":"40","end":"80"},...]}
type ReshardInput struct {
	Database        string          `json:"database"`
	ShardGroup      string          `json:"shard_group"`
	TargetKeyRanges []KeyRangeInput `json:"target_key_ranges"`
	// MaxLagBytes: the catch-up phase ends when every stream's slot is
	// within this many WAL bytes of its source; 0 means 1 MiB.
	MaxLagBytes int64 `json:"max_lag_bytes,omitempty"`
	// CopyBatchRows bounds the rows of each copy batch (one transaction
	// with its progress row on every target): 0 means the worker's
	// default; the plan refuses a value outside 1..MaxCopyBatchRows.
	CopyBatchRows int `json:"copy_batch_rows,omitempty"`
	// Resume, set only by the workflow itself when it continues as new,
	// carries the plan and what is done.
	Resume *ReshardResume `json:"resume,omitempty"`
}

// KeyRangeInput is one target key range, written as in the topology:
// hexadecimal prefixes, an empty bound unbounded.
type KeyRangeInput struct {
	ShardUID string `json:"shard_uid"`
	Start    string `json:"start,omitempty"`
	End      string `json:"end,omitempty"`
}

// ReshardResume is the state a reshard continues as new with.
type ReshardResume struct {
	Plan     ReshardPlan          `json:"plan"`
	Copied   map[string]int64     `json:"copied"`
	LastDiff *DiffTablesResult    `json:"last_diff,omitempty"`
	Streams  map[string]LagSample `json:"streams,omitempty"`
	// Cutover is set once the topology is switched: the run continues
	// in phase switched.
	Cutover *CutoverReport `json:"cutover,omitempty"`
	// FenceGeneration is the next fence's (CutoverInput).
	FenceGeneration int `json:"fence_generation,omitempty"`
	// Reads is set while replica reads alone are switched.
	Reads *ReadsSwitch `json:"reads,omitempty"`
	// Restarts and ReverseBroken are ReshardProgress's.
	Restarts      int    `json:"restarts,omitempty"`
	ReverseBroken string `json:"reverse_broken,omitempty"`
}

// ReshardTable is one table of the group: where it is and its shard key.
type ReshardTable struct {
	Schema      string `json:"schema"`
	Name        string `json:"name"`
	ShardColumn string `json:"shard_column"`
	// ReverseShardColumn, set by MoveTables, is the column the reverse
	// streams route by (the source group's); Reversed swaps the two.
	ReverseShardColumn string `json:"reverse_shard_column,omitempty"`
}

// DisplayName is schema.name.
func (t ReshardTable) DisplayName() string { return t.Schema + "." + t.Name }

// ReshardPlan is what PlanReshard found and checked; every later step
// works from it, so a reshard does not change course if the stored
// topology changes under it.
type ReshardPlan struct {
	// Key names the reshard's objects on every instance (progress rows,
	// replication origins): short, and the same for every run of the
	// workflow id.
	Key        string         `json:"key"`
	Database   string         `json:"database"`
	ShardGroup string         `json:"shard_group"`
	Sources    []string       `json:"sources"`
	Targets    []string       `json:"targets"`
	Tables     []ReshardTable `json:"tables"`
	// TargetTopology is the stored topology with the group's key ranges
	// replaced by the targets': the placement rows are routed by.
	TargetTopology json.RawMessage `json:"target_topology"`
	// TopologyRevision is the stored topology's revision the plan read.
	TopologyRevision int64 `json:"topology_revision"`
	// SourceTopology is the stored topology the plan read: the group's
	// key ranges before the reshard, which the reverse streams route by
	// and the cutover checks are still stored.
	SourceTopology json.RawMessage `json:"source_topology,omitempty"`
	// TargetShardGroup is set by MoveTables only: the group the tables
	// move to (ShardGroup is the one they leave). Such a plan moves the
	// tables' placements in the topology, not a group's key ranges, and
	// its Complete drops the tables from the sources (an import's keeps
	// them).
	TargetShardGroup string `json:"target_shard_group,omitempty"`
	// ImportSecret is set by an import (MoveTables from a Postgres
	// outside the cluster): the path, on the workers, of the file holding
	// that Postgres' connection string, never the string itself. The
	// source is then the pseudo-shard ImportSourceShard.
	ImportSecret string `json:"import_secret,omitempty"`
	// Queues maps a shard (source or target: the reverse streams read
	// the targets) to the task queue of the Replicator beside it,
	// workflows.ReplicatorQueue, when PlanReshard found one registered.
	// A shard it does not name has its CopyTables and StreamChanges run on
	// the workflow's own task queue, by the general workers.
	Queues map[string]string `json:"queues,omitempty"`
	// CopyBatchRows is the input's copy_batch_rows, checked: 0 means the
	// worker's default.
	CopyBatchRows int `json:"copy_batch_rows,omitempty"`
	// RowsEstimated is, per source and table (schema.name), the rows the
	// plan expects to copy: the source's pg_class.reltuples, or a count
	// where the table was never analysed.
	RowsEstimated map[string]map[string]int64 `json:"rows_estimated,omitempty"`
	// Terms holds each shard's term (store.ShardState.Term) from before
	// the movement made its slots there: the sources' from the plan (or
	// the movement's last restart), the targets' from the cutover's
	// PrepareReverse. A stream whose source's term moved fails with
	// SourceFailoverError. A shard it does not name is not checked.
	Terms map[string]int64 `json:"terms,omitempty"`
}

// MaxCopyBatchRows bounds copy_batch_rows: a batch is one transaction on
// every target, held in the copy's memory while it is routed.
const MaxCopyBatchRows = 1_000_000

// EstimatedRows sums the plan's estimate per table over its sources.
func (p ReshardPlan) EstimatedRows() map[string]int64 {
	if len(p.RowsEstimated) == 0 {
		return nil
	}
	m := map[string]int64{}
	for _, tables := range p.RowsEstimated {
		for t, n := range tables {
			m[t] += n
		}
	}
	return m
}

// SourceFailoverError is the Type of the non-retryable error the copy
// and stream activities fail with when their source failed over since
// its slot was made (its term moved, or the slot is missing on its
// primary): the slot is lost, and a new one would start after changes
// the targets lack. The message names the shard and both terms, and
// begins with its SQLSTATE (55000).
const SourceFailoverError = "SourceFailover"

// IsSourceFailover says whether err, or an error it wraps (joined
// errors included), is a SourceFailoverError.
func IsSourceFailover(err error) bool {
	if a, ok := err.(*temporal.ApplicationError); ok && a.Type() == SourceFailoverError {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		return slices.ContainsFunc(u.Unwrap(), IsSourceFailover)
	case interface{ Unwrap() error }:
		return IsSourceFailover(u.Unwrap())
	}
	return false
}

// Imports says whether the plan imports from an external Postgres.
func (p ReshardPlan) Imports() bool { return p.ImportSecret != "" }

// MovesTables says whether the plan is a MoveTables' one.
func (p ReshardPlan) MovesTables() bool { return p.TargetShardGroup != "" }

// Reversed is the plan of the reverse streams a cutover starts: from the
// targets back to the sources, routed by the sources' key ranges. It
// keeps the key, so its slots, publications and origins are found by the
// same cleanup; their names differ from the forward ones because they
// name other shards (or are on other instances).
func (p ReshardPlan) Reversed() ReshardPlan {
	r := p
	r.Sources, r.Targets = p.Targets, p.Sources
	r.TargetTopology, r.SourceTopology = p.SourceTopology, p.TargetTopology
	if p.MovesTables() {
		r.ShardGroup, r.TargetShardGroup = p.TargetShardGroup, p.ShardGroup
		r.Tables = make([]ReshardTable, len(p.Tables))
		for i, t := range p.Tables {
			t.ShardColumn, t.ReverseShardColumn = t.ReverseShardColumn, t.ShardColumn
			r.Tables[i] = t
		}
	}
	return r
}

// FenceTrigger names the trigger, on every table of a fenced source,
// that refuses writes after the cutover (and its function, in schema
// _tessera).
func (p ReshardPlan) FenceTrigger() string { return p.Key + "_fence" }

// OriginPrefix begins the name of every replication origin the
// reshard's streams apply with (replicator.OriginName): a stream skips
// source transactions that carry one, so forward and reverse streams
// never send each other's changes back.
func (p ReshardPlan) OriginPrefix() string { return "tessera_" + p.Key + "_" }

// ReshardKey is the short name of a workflow id's objects: "rs" and 16 hex
// digits, safe in slot, publication and origin names.
func ReshardKey(workflowID string) string {
	sum := sha256.Sum256([]byte(workflowID))
	return "rs" + hex.EncodeToString(sum[:8])
}

// Slot is the logical replication slot of one source shard.
func (p ReshardPlan) Slot(source string) string {
	sum := sha256.Sum256([]byte(source))
	return p.Key + "_" + hex.EncodeToString(sum[:6])
}

// Publication is the publication of the group's tables on every source.
func (p ReshardPlan) Publication() string { return p.Key }

// PlanReshardInput is PlanReshard's input.
type PlanReshardInput struct {
	WorkflowID string       `json:"workflow_id"`
	Input      ReshardInput `json:"input"`
}

// SourceInput names one source shard of a plan: CopyTables' and
// StreamChanges' input.
type SourceInput struct {
	Plan   ReshardPlan `json:"plan"`
	Source string      `json:"source"`
	// FenceGeneration names the fence whose marker ends StreamChanges
	// (CutoverInput.FenceGeneration).
	FenceGeneration int `json:"fence_generation,omitempty"`
}

// CopyTablesResult says what one source's copy did.
type CopyTablesResult struct {
	Source string `json:"source"`
	// Rows per table (schema.name) that the targets committed, over
	// every attempt: read from the targets' progress rows, so a killed
	// attempt's batches count too.
	Rows map[string]int64 `json:"rows"`
}

// CopyHeartbeat is CopyTables' heartbeat detail: where it is.
type CopyHeartbeat struct {
	Table string           `json:"table"`
	Rows  map[string]int64 `json:"rows"`
}

// StreamHeartbeat is StreamChanges' heartbeat detail.
type StreamHeartbeat struct {
	// Source is the stream's source shard.
	Source     string  `json:"source,omitempty"`
	LagBytes   int64   `json:"lag_bytes"`
	LagSeconds float64 `json:"lag_seconds"`
}

// LagSample is how far one source's stream is behind: the WAL bytes
// between the source's position and its slot's confirmed position, which
// the stream advances only past what every target has durably applied.
type LagSample struct {
	Source       string `json:"source"`
	LagBytes     int64  `json:"lag_bytes"`
	ConfirmedLSN string `json:"confirmed_lsn"`
	// LagSeconds is, while the stream is behind, the age of the last
	// source commit it applied (from its heartbeat; 0 when caught up or
	// not known).
	LagSeconds float64 `json:"lag_seconds,omitempty"`
}

// StreamLagResult is StreamLag's answer, one sample per source.
type StreamLagResult struct {
	Sources []LagSample `json:"sources"`
}

// DiffTablesResult is the last VDiff: every table's report as the
// replicator writes it (replicator.DiffReport's JSON), and totals.
type DiffTablesResult struct {
	Reports     map[string]json.RawMessage `json:"reports"`
	Differences int64                      `json:"differences"`
	Done        bool                       `json:"done"`
}

// ReshardProgress answers ProgressQuery.
type ReshardProgress struct {
	Phase  string           `json:"phase"`
	Copied map[string]int64 `json:"rows_copied"`
	// RowsEstimated is the plan's estimate of the rows to copy, per
	// table: "rows copied N of ~M".
	RowsEstimated map[string]int64     `json:"rows_estimated,omitempty"`
	Streams       map[string]LagSample `json:"streams,omitempty"`
	LastDiff      *DiffTablesResult    `json:"last_diff,omitempty"`
	Cutover       *CutoverReport       `json:"cutover,omitempty"`
	// ReadsSwitched is set while a SwitchTraffic of reads has the
	// targets serve replica reads and the sources everything else.
	ReadsSwitched *ReadsSwitch `json:"reads_switched,omitempty"`
	Error         string       `json:"error,omitempty"`
	// Restarts counts the times a source's failover restarted the
	// movement from new snapshots; LastRestart says why the last did.
	Restarts    int    `json:"restarts,omitempty"`
	LastRestart string `json:"last_restart,omitempty"`
	// ReverseBroken, after the cutover, says why a reverse stream
	// stopped for good (a target failed over, its slot lost): the
	// sources lack the targets' later writes, so ReverseTraffic is
	// refused; Complete still ends the movement.
	ReverseBroken string `json:"reverse_broken,omitempty"`
}

// ReshardResult is how a reshard ended.
type ReshardResult struct {
	Phase  string           `json:"phase"`
	Steps  []string         `json:"steps"`
	Copied map[string]int64 `json:"rows_copied"`
}

// ResetMovementResult is what ResetMovement did.
type ResetMovementResult struct {
	// Terms are the sources' terms, read before the slots were dropped:
	// the restarted movement's ReshardPlan.Terms.
	Terms map[string]int64 `json:"terms"`
	// Unreached names the instances ("id of shard: why") where the slot
	// could not be dropped: one left there keeps WAL until dropped.
	Unreached []string `json:"unreached,omitempty"`
}
