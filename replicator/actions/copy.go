package actions

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/jackc/pgx/v5"

	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/topo"
	"github.com/tesseradb/tessera/workflows"
)

// CopyTables copies every table of the plan from one source shard to the
// targets: one long activity per source, heartbeating the table it is on
// and the rows read so far. It creates the publication (before the slot:
// pgoutput reads the publication as of each change) and the stream's
// slot, whose exported snapshot the copy reads. A retried attempt finds
// the slot there, reads from a temporary slot's fresh snapshot instead and
// resumes where the targets' progress rows say (replicator.CopyTable);
// the stream later skips, for the rows copied from the later snapshot,
// the changes that snapshot already held.
func (a *Actions) CopyTables(ctx context.Context, in workflows.SourceInput) (workflows.CopyTablesResult, error) {
	a = a.forPlan(in.Plan)
	res := workflows.CopyTablesResult{Source: in.Source, Rows: map[string]int64{}}
	var beat workflows.CopyHeartbeat
	if lastDetails(ctx, &beat) {
		for t, n := range beat.Rows {
			res.Rows[t] = n
		}
	}
	var mu sync.Mutex
	current := ""
	stop := beating(ctx, func() any {
		mu.Lock()
		defer mu.Unlock()
		rows := make(map[string]int64, len(res.Rows))
		for t, n := range res.Rows {
			rows[t] = n
		}
		return workflows.CopyHeartbeat{Table: current, Rows: rows}
	})
	defer stop()

	plan := in.Plan
	target, err := topo.Parse(plan.TargetTopology)
	if err != nil {
		return res, activityError(err)
	}
	if err := a.checkTerm(ctx, plan, in.Source); err != nil {
		return res, err
	}
	src, srcURL, err := a.connect(ctx, in.Source, plan.Database)
	if err != nil {
		return res, err
	}
	defer closeAll(src)
	if err := ensurePublication(ctx, src, plan); err != nil {
		return res, activityError(fmt.Errorf("source %s: %w", in.Source, err))
	}
	slot, temporary := plan.Slot(in.Source), false
	exists, err := replicator.SlotExists(ctx, src, slot)
	if err != nil {
		return res, activityError(err)
	}
	if exists {
		slot, temporary = slot+"_c", true
	} else if err := a.checkNoEarlierCopy(ctx, plan, in.Source); err != nil {
		return res, err
	}
	snap, err := replicator.OpenSnapshot(ctx, srcURL, slot, temporary)
	if err != nil {
		return res, activityError(fmt.Errorf("source %s: %w", in.Source, err))
	}
	defer snap.Close(context.Background())
	// A promotion between the check above and the slot: the slot may be
	// on the old primary.
	if err := a.checkTerm(ctx, plan, in.Source); err != nil {
		return res, err
	}
	readConn, _, err := a.connect(ctx, in.Source, plan.Database)
	if err != nil {
		return res, err
	}
	defer closeAll(readConn)
	read, err := replicator.BeginSnapshotRead(ctx, readConn, snap)
	if err != nil {
		return res, activityError(err)
	}
	defer read.Rollback(context.Background())

	copier := &replicator.Copier{Workflow: plan.Key, Source: in.Source, Snapshot: snap, Read: read, BatchRows: a.copyBatchRows(plan)}
	for _, shard := range plan.Targets {
		conn, _, err := a.connect(ctx, shard, plan.Database)
		if err != nil {
			return res, err
		}
		defer closeAll(conn)
		if err := replicator.EnsureProgressTable(ctx, conn); err != nil {
			return res, activityError(fmt.Errorf("target %s: %w", shard, err))
		}
		copier.Targets = append(copier.Targets, replicator.Target{Shard: shard, Conn: conn})
	}
	for _, t := range plan.Tables {
		mu.Lock()
		current = t.DisplayName()
		mu.Unlock()
		table, err := replicator.DescribeTable(ctx, read.Conn(), t.Schema, t.Name, t.ShardColumn)
		if err != nil {
			return res, activityError(fmt.Errorf("source %s: %w", in.Source, err))
		}
		stats, err := copier.CopyTable(ctx, table, target.Resolve(plan.Database, t.Schema, t.Name))
		mu.Lock()
		res.Rows[t.DisplayName()] += stats.Rows
		mu.Unlock()
		if err != nil {
			return res, activityError(fmt.Errorf("copying %s from %s: %w", t.DisplayName(), in.Source, err))
		}
		// A heartbeat records rows only for tables done, so the attempts
		// a kill ended are missing from the count: the targets' counters,
		// committed with every batch, have them all.
		committed, err := committedRows(ctx, copier.Targets, plan.Key, in.Source, t.DisplayName())
		if err != nil {
			return res, activityError(err)
		}
		mu.Lock()
		res.Rows[t.DisplayName()] = committed
		mu.Unlock()
	}
	return res, nil
}

// committedRows sums the rows the targets committed of a table copied from
// one source, over every attempt.
func committedRows(ctx context.Context, targets []replicator.Target, workflow, source, table string) (int64, error) {
	var n int64
	for _, tg := range targets {
		c, err := replicator.ReadCopyCounters(ctx, tg.Conn, workflow, source, table)
		if err != nil {
			return 0, fmt.Errorf("copy counters on %s: %w", tg.Shard, err)
		}
		n += c.Rows
	}
	return n, nil
}

// ensurePublication creates the plan's publication of its tables on a
// source unless it is there.
func ensurePublication(ctx context.Context, conn *pgx.Conn, plan workflows.ReshardPlan) error {
	var n int
	if err := conn.QueryRow(ctx, "SELECT count(*) FROM pg_publication WHERE pubname = $1", plan.Publication()).Scan(&n); err != nil || n > 0 {
		return err
	}
	names := make([]string, len(plan.Tables))
	for i, t := range plan.Tables {
		names[i] = pgx.Identifier{t.Schema, t.Name}.Sanitize()
	}
	_, err := conn.Exec(ctx, "CREATE PUBLICATION "+pgx.Identifier{plan.Publication()}.Sanitize()+" FOR TABLE "+strings.Join(names, ", "))
	return err
}
