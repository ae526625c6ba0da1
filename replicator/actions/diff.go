package actions

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/workflows"
)

// diffChunksPerCall bounds each Differ.Diff call, so that the report in
// the heartbeat is never far behind.
const diffChunksPerCall = 20

// DiffTables runs a VDiff of every table of the plan at one consistent
// point. The workflow stops the streams first; for each source this takes
// a snapshot (a temporary slot's) and runs the source's stream exactly up
// to it, then takes the targets' snapshots and compares, chunk by chunk,
// heartbeating every table's report. A retried attempt continues each
// table after the last chunk its heartbeat holds, on new snapshots (a new
// consistent point; the chunks compared before keep their results).
func (a *Actions) DiffTables(ctx context.Context, plan workflows.ReshardPlan) (workflows.DiffTablesResult, error) {
	var prior workflows.DiffTablesResult
	lastDetails(ctx, &prior)
	var mu sync.Mutex
	// The first heartbeat keeps the prior reports, should this attempt
	// die before its first chunk.
	latest := prior
	stop := beating(ctx, func() any {
		mu.Lock()
		defer mu.Unlock()
		return latest
	})
	defer stop()
	return a.diffTables(ctx, plan, prior, func(r workflows.DiffTablesResult) {
		mu.Lock()
		latest = r
		mu.Unlock()
	})
}

// diffTables is DiffTables going on from prior's reports; it hands a copy
// of the reports to progress after every stretch of chunks, what the next
// heartbeat carries.
func (a *Actions) diffTables(ctx context.Context, plan workflows.ReshardPlan, prior workflows.DiffTablesResult,
	progress func(workflows.DiffTablesResult)) (workflows.DiffTablesResult, error) {
	a = a.forPlan(plan)
	res := workflows.DiffTablesResult{Reports: map[string]json.RawMessage{}}
	for t, r := range prior.Reports {
		res.Reports[t] = r
	}
	snapshot := func() workflows.DiffTablesResult {
		c := workflows.DiffTablesResult{Reports: make(map[string]json.RawMessage, len(res.Reports))}
		for t, r := range res.Reports {
			c.Reports[t] = r
			var rep replicator.DiffReport
			if json.Unmarshal(r, &rep) == nil {
				c.Differences += rep.Total()
			}
		}
		return c
	}
	progress(snapshot())

	target, err := topo.Parse(plan.TargetTopology)
	if err != nil {
		return res, activityError(err)
	}
	var sources, targets []replicator.DiffSide
	for _, src := range plan.Sources {
		conn, url, err := a.connect(ctx, src, plan.Database)
		if err != nil {
			return res, err
		}
		defer closeAll(conn)
		read, lsn, err := replicator.OpenDiffSnapshot(ctx, url, plan.Slot(src)+"_d", conn)
		if err != nil {
			return res, activityError(fmt.Errorf("source %s: %w", src, err))
		}
		defer read.Rollback(context.Background())
		if err := a.runStream(ctx, plan, src, lsn); err != nil {
			return res, err
		}
		sources = append(sources, replicator.DiffSide{Shard: src, Read: read})
	}
	for _, shard := range plan.Targets {
		conn, _, err := a.connect(ctx, shard, plan.Database)
		if err != nil {
			return res, err
		}
		defer closeAll(conn)
		read, err := replicator.BeginDiffRead(ctx, conn, nil)
		if err != nil {
			return res, activityError(fmt.Errorf("target %s: %w", shard, err))
		}
		defer read.Rollback(context.Background())
		targets = append(targets, replicator.DiffSide{Shard: shard, Read: read})
	}

	var differences int64
	for _, t := range plan.Tables {
		var report replicator.DiffReport
		if raw := res.Reports[t.DisplayName()]; raw != nil {
			if err := json.Unmarshal(raw, &report); err != nil {
				return res, activityError(err)
			}
		}
		table, err := replicator.DescribeTable(ctx, sources[0].Read.Conn(), t.Schema, t.Name, t.ShardColumn)
		if err != nil {
			return res, activityError(err)
		}
		d := &replicator.Differ{Table: table, Placement: target.Resolve(plan.Database, t.Schema, t.Name),
			Sources: sources, Targets: targets, MaxChunks: diffChunksPerCall, ChunkRows: a.diffChunkRows}
		for !report.Done {
			report, err = d.Diff(ctx, report)
			if raw, merr := json.Marshal(report); merr == nil {
				res.Reports[t.DisplayName()] = raw
				progress(snapshot())
			}
			if err != nil {
				return res, activityError(fmt.Errorf("VDiff of %s: %w", t.DisplayName(), err))
			}
		}
		differences += report.Total()
	}
	res.Differences, res.Done = differences, true
	return res, nil
}
