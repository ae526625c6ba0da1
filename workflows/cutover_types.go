package workflows

import "time"

// The cutover's activity inputs and results (SwitchTraffic, Complete).

// CutoverInput is the input of the cutover's activities.
type CutoverInput struct {
	Plan ReshardPlan `json:"plan"`
	// FenceGeneration numbers the fences of one reshard: a fence writes
	// it in its marker, and the streams started for it stop only at a
	// marker of their generation. An undone fence's markers (a retried
	// fence writes one per attempt) stay in the WAL; the streams started
	// after the undo, of the next generation, pass them by.
	FenceGeneration int `json:"fence_generation,omitempty"`
	// BufferID names the table buffer the cutover sets and clears.
	BufferID string `json:"buffer_id,omitempty"`
	// BufferFor is how long routers hold the tables' statements.
	BufferFor time.Duration `json:"buffer_for,omitempty"`
	// MaxLagBytes and MaxCatchUp bound CheckCutover: each stream's slot
	// within MaxLagBytes of its source, and confirming the source's
	// current position within MaxCatchUp.
	MaxLagBytes int64         `json:"max_lag_bytes,omitempty"`
	MaxCatchUp  time.Duration `json:"max_catch_up,omitempty"`
	// Markers are, per source, the LSN of the fence's marker message
	// (FenceSources' result, for the record).
	Markers map[string]string `json:"markers,omitempty"`
	// Revision is the topology revision that moved the group
	// (WaitRouters' input).
	Revision int64 `json:"revision,omitempty"`
	// RouterWait bounds WaitRouters.
	RouterWait time.Duration `json:"router_wait,omitempty"`
}

// CheckCutoverResult is what CheckCutover measured, per source.
type CheckCutoverResult struct {
	Sources []LagSample `json:"sources"`
	// CatchUpSeconds: how long each stream took to confirm the source's
	// position as it was when asked.
	CatchUpSeconds map[string]float64 `json:"catch_up_seconds"`
}

// FenceResult is FenceSources' result.
type FenceResult struct {
	Markers map[string]string `json:"markers"`
	// Fenced is when the first source's fence committed (the worker's
	// clock): writes to the group's tables stop there.
	Fenced time.Time `json:"fenced"`
}

// SwitchTopologyResult is SwitchTopology's result.
type SwitchTopologyResult struct {
	Revision int64     `json:"revision"`
	Switched time.Time `json:"switched"`
}

// WaitRoutersResult says which routers had not applied the revision when
// WaitRouters stopped waiting (none: every live router had).
type WaitRoutersResult struct {
	Waiting []string `json:"waiting,omitempty"`
	Routers int      `json:"routers"`
}

// CutoverReport is what a cutover did and how long writes paused, by the
// worker's clock.
type CutoverReport struct {
	// Reverse: a ReverseTraffic, which moved the group back to the
	// sources.
	Reverse  bool  `json:"reverse,omitempty"`
	Revision int64 `json:"revision"`
	// BufferSet and BufferCleared bound the routers' hold on the tables.
	BufferSet     time.Time `json:"buffer_set"`
	BufferCleared time.Time `json:"buffer_cleared,omitzero"`
	// Fenced to Switched: no write to the group's tables can commit
	// anywhere.
	Fenced   time.Time `json:"fenced"`
	Switched time.Time `json:"switched"`
	// RoutersWaiting are the routers that had not applied Revision when
	// the wait ended (the fence refuses their writes).
	RoutersWaiting []string `json:"routers_waiting,omitempty"`
}

// WritePause is how long no write to the group's tables could commit:
// from the first fence to the topology switch.
func (c CutoverReport) WritePause() time.Duration { return c.Switched.Sub(c.Fenced) }

// BufferHeld is how long routers were asked to hold the tables.
func (c CutoverReport) BufferHeld() time.Duration {
	if c.BufferCleared.IsZero() {
		return 0
	}
	return c.BufferCleared.Sub(c.BufferSet)
}

// ReadsInput is SwitchReplicaReads' input: a reads-first SwitchTraffic
// (On) or its undo.
type ReadsInput struct {
	// Plan is the forward plan: its targets take the replica reads.
	Plan ReshardPlan `json:"plan"`
	// On moves the group's replica reads to the plan's targets; off
	// puts them back on its sources.
	On bool `json:"on"`
}
