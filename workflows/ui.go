package workflows

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// What the Temporal Web UI shows of Tessera's operations, besides the
// queries: a one-line summary per run (set by whoever starts it: the
// Summary methods below), current details the workflow rewrites as it goes
// (markdown), a summary on each activity and timer naming its shard or
// table, and the TesseraPhase search attribute, so that the workflow list
// can be filtered by phase (TesseraPhase="ready_for_cutover").

// PhaseAttribute is the Keyword search attribute that holds an
// operation's phase. The namespace must have it: the embedded server
// (dev/temporal) and every worker (package worker) register it.
const PhaseAttribute = "TesseraPhase"

// SearchAttributes are the custom search attributes Tessera's workflows
// set, with their types.
var SearchAttributes = map[string]enumspb.IndexedValueType{
	PhaseAttribute: enumspb.INDEXED_VALUE_TYPE_KEYWORD,
}

var phaseKey = temporal.NewSearchAttributeKeyKeyword(PhaseAttribute)

// phaseAttributeVersion: runs started before the attribute existed replay
// without its upserts, which are commands in their history.
const phaseAttributeVersion = "tessera-phase-attribute"

// upsertPhase sets the run's TesseraPhase. A failed upsert is logged, not
// returned: the phase is for people watching, never a reason to stop.
func upsertPhase(ctx workflow.Context, phase string) {
	if workflow.GetVersion(ctx, phaseAttributeVersion, workflow.DefaultVersion, 1) == workflow.DefaultVersion {
		return
	}
	if err := workflow.UpsertTypedSearchAttributes(ctx, phaseKey.ValueSet(phase)); err != nil {
		workflow.GetLogger(ctx).Warn("setting the phase search attribute", "phase", phase, "error", err)
	}
}

// Phases of Switchover and Failover, as TesseraPhase and their current
// details show them; Reshard's are the Phase constants of reshard_types.go.
const (
	PhaseInspecting = "inspecting"
	PhaseDraining   = "draining"
	PhaseFencing    = "fencing"
	PhaseReplaying  = "replaying"
	PhasePromoting  = "promoting"
	PhasePublishing = "publishing"
	PhaseRepointing = "repointing"
	PhaseResuming   = "resuming"
	PhaseRejoining  = "rejoining"
	PhaseUndoing    = "undoing"
	PhaseDone       = "done"
	PhaseFailed     = "failed"
)

// withSummary gives the activities started with ctx a summary, shown in
// the UI beside the activity's name.
func withSummary(ctx workflow.Context, format string, args ...any) workflow.Context {
	opts := workflow.GetActivityOptions(ctx)
	opts.Summary = fmt.Sprintf(format, args...)
	return workflow.WithActivityOptions(ctx, opts)
}

// sleep is workflow.Sleep with a summary on its timer.
func sleep(ctx workflow.Context, d time.Duration, format string, args ...any) error {
	return workflow.NewTimerWithOptions(ctx, d, workflow.TimerOptions{Summary: fmt.Sprintf(format, args...)}).Get(ctx, nil)
}

// Summary is the one line the UI lists a reshard's run with.
func (in ReshardInput) Summary() string {
	targets := make([]string, len(in.TargetKeyRanges))
	for i, kr := range in.TargetKeyRanges {
		targets[i] = fmt.Sprintf("%s [%s, %s)", kr.ShardUID, kr.Start, kr.End)
	}
	return fmt.Sprintf("Reshard %s.%s to %s", in.Database, in.ShardGroup, strings.Join(targets, ", "))
}

// Summary is the one line the UI lists a switchover's run with.
func (in SwitchoverInput) Summary() string {
	to := in.Candidate
	if to == "" {
		to = "the best replica"
	}
	return fmt.Sprintf("Switchover of shard %s: primary to %s", in.Shard, to)
}

// Summary is the one line the UI lists a failover's run with.
func (in FailoverInput) Summary() string {
	s := "Failover of shard " + in.Shard
	if in.Force {
		s += " (forced)"
	}
	if in.Reason != "" {
		s += ": " + in.Reason
	}
	return s
}

// Summary is the one line the UI lists a rejoin's run with.
func (in RejoinInput) Summary() string {
	return fmt.Sprintf("Rejoin of %s as a replica of shard %s", in.Instance, in.Shard)
}

// Summary is the one line the UI lists a repair's run with.
func (in RepairInput) Summary() string { return "Repair of shard " + in.Shard }

// reshardDetails renders a reshard's progress as its current details.
func reshardDetails(title string, p ReshardProgress, step string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**%s**: %s\n\n", title, p.Phase)
	fmt.Fprintf(&b, "- step: %s\n", step)
	switch {
	case len(p.RowsEstimated) > 0:
		fmt.Fprintf(&b, "- rows copied: %d of ~%d (%s)\n", sumRows(p.Copied), sumRows(p.RowsEstimated), perTable(p.Copied))
	case len(p.Copied) > 0:
		fmt.Fprintf(&b, "- rows copied: %d (%s)\n", sumRows(p.Copied), perTable(p.Copied))
	}
	if len(p.Streams) > 0 {
		var lag int64
		var seconds float64
		for _, s := range p.Streams {
			lag, seconds = max(lag, s.LagBytes), max(seconds, s.LagSeconds)
		}
		fmt.Fprintf(&b, "- lag: %d bytes, %.1f s at most, over %d streams\n", lag, seconds, len(p.Streams))
	}
	if d := p.LastDiff; d != nil {
		fmt.Fprintf(&b, "- last VDiff: %d differences over %d tables (done: %v)\n", d.Differences, len(d.Reports), d.Done)
	}
	if rs := p.ReadsSwitched; rs != nil {
		fmt.Fprintf(&b, "- reads switched: replica reads on the targets since topology revision %d; writes and primary reads on the sources\n", rs.Revision)
	}
	if p.Error != "" {
		fmt.Fprintf(&b, "- error: %s\n", p.Error)
	}
	return b.String()
}

// shardOpDetails renders a switchover's or failover's current details.
func shardOpDetails(kind, shard, phase, step string) string {
	return fmt.Sprintf("**%s of shard %s**: %s\n\n- step: %s\n", kind, shard, phase, step)
}

func sumRows(m map[string]int64) int64 {
	var n int64
	for _, v := range m {
		n += v
	}
	return n
}

// perTable lists table=rows, sorted by table: maps iterate at random and
// workflow code must be deterministic.
func perTable(m map[string]int64) string {
	tables := make([]string, 0, len(m))
	for t := range m {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	parts := make([]string, len(tables))
	for i, t := range tables {
		parts[i] = fmt.Sprintf("%s %d", t, m[t])
	}
	return strings.Join(parts, ", ")
}

// enterReshardPhase records a reshard's new phase: in its progress (the
// queries), as TesseraPhase and in its current details, which from then
// on follow every step.
func enterReshardPhase(ctx workflow.Context, p *progress, title string, prog *ReshardProgress, phase string) {
	prog.Phase = phase
	if p.details == nil {
		p.details = func(step string) string { return reshardDetails(title, *prog, step) }
	}
	upsertPhase(ctx, phase)
	p.step("phase %s", phase)
}

// shardOp is a switchover's or failover's phase, shown as TesseraPhase
// and, with its latest step, as the run's current details.
type shardOp struct {
	p                  *progress
	kind, shard, phase string
}

// watchShardOp starts showing a shard operation in the UI.
func watchShardOp(ctx workflow.Context, p *progress, kind, shard string) *shardOp {
	o := &shardOp{p: p, kind: kind, shard: shard}
	p.details = func(step string) string { return shardOpDetails(o.kind, o.shard, o.phase, step) }
	o.enter(ctx, PhaseInspecting)
	return o
}

// enter records the operation's new phase.
func (o *shardOp) enter(ctx workflow.Context, phase string) {
	o.phase = phase
	upsertPhase(ctx, phase)
	o.p.show()
}

// tableNames lists a plan's tables, for summaries.
func (p ReshardPlan) tableNames() string {
	names := make([]string, len(p.Tables))
	for i, t := range p.Tables {
		names[i] = t.DisplayName()
	}
	return strings.Join(names, ", ")
}

// shardNames lists a plan's sources and targets, for summaries.
func (p ReshardPlan) shardNames() string {
	return strings.Join(slices.Concat(p.Sources, p.Targets), ", ")
}
