package cli

import (
	"context"
	"errors"
	"fmt"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/workflows"
)

// progressPoll is how often a reshard's progress is read while it is
// followed.
const progressPoll = time.Second

// reshardLive is a reshard's progress query answer, plus what its running
// activities' heartbeats say: the rows of the copies still running (the
// query counts a source's rows once its copy is done) and the streams'
// lag of the last second (the query's is sampled every few seconds).
type reshardLive struct {
	workflows.ReshardProgress
	copying    int64   // rows read by copies still running
	lagSeconds float64 // the largest of the running streams'
	streaming  bool
	// diffing is the running DiffTables' heartbeat: the VDiff so far.
	diffing *workflows.DiffTablesResult
}

// reshardProgress reads a reshard's progress: the query, and its pending
// activities' heartbeats. runID "" is the latest run (a reshard that
// waits long continues as new).
func reshardProgress(ctx context.Context, c client.Client, id, runID string) (reshardLive, error) {
	var p reshardLive
	qctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	v, err := c.QueryWorkflow(qctx, id, runID, workflows.ProgressQuery)
	if err != nil {
		return p, err
	}
	if err := v.Get(&p.ReshardProgress); err != nil {
		return p, err
	}
	d, err := c.DescribeWorkflowExecution(qctx, id, runID)
	if err != nil {
		// The query's answer is enough.
		return p, nil
	}
	dc := converter.GetDefaultDataConverter()
	for _, a := range d.GetPendingActivities() {
		if a.GetHeartbeatDetails() == nil {
			continue
		}
		switch a.GetActivityType().GetName() {
		case workflows.CopyTablesActivity:
			var hb workflows.CopyHeartbeat
			if dc.FromPayloads(a.GetHeartbeatDetails(), &hb) == nil {
				for _, n := range hb.Rows {
					p.copying += n
				}
			}
		case workflows.DiffTablesActivity:
			var hb workflows.DiffTablesResult
			if dc.FromPayloads(a.GetHeartbeatDetails(), &hb) == nil {
				p.diffing = &hb
			}
		case workflows.StreamChangesActivity:
			var hb workflows.StreamHeartbeat
			if dc.FromPayloads(a.GetHeartbeatDetails(), &hb) == nil {
				p.streaming = true
				p.lagSeconds = max(p.lagSeconds, hb.LagSeconds)
			}
		}
	}
	return p, nil
}

// line is the one-line progress: phase, rows copied, lag, last VDiff,
// and whether replica reads alone are switched.
func (p reshardLive) line() string {
	var copied int64
	for _, n := range p.Copied {
		copied += n
	}
	lag := "-"
	if len(p.Streams) > 0 {
		var bytes int64
		for _, s := range p.Streams {
			bytes = max(bytes, s.LagBytes)
		}
		lag = fmt.Sprintf("%d B", bytes)
		if p.streaming {
			lag += fmt.Sprintf(" %.1fs", p.lagSeconds)
		}
	}
	rows := fmt.Sprint(copied + p.copying)
	if len(p.RowsEstimated) > 0 {
		var est int64
		for _, n := range p.RowsEstimated {
			est += n
		}
		rows += fmt.Sprintf(" of ~%d", est)
	}
	vdiff := diffLine(p.LastDiff)
	if p.diffing != nil {
		vdiff = "running: " + diffProgress(p.diffing)
	}
	s := fmt.Sprintf("phase %s | rows copied %s | lag %s | VDiff %s", p.Phase, rows, lag, vdiff)
	if p.Error != "" {
		s += " | error: " + p.Error
	}
	if r := p.ReadsSwitched; r != nil {
		s += fmt.Sprintf(" | replica reads switched (revision %d)", r.Revision)
	}
	return s
}

// diffLine sums up a VDiff's result.
func diffLine(d *workflows.DiffTablesResult) string {
	switch {
	case d == nil:
		return "-"
	case !d.Done:
		return fmt.Sprintf("%d differences so far", d.Differences)
	}
	return fmt.Sprintf("%d differences", d.Differences)
}

// notFound says plainly that no such workflow runs.
func notFound(id string, err error) error {
	var nf *serviceerror.NotFound
	if errors.As(err, &nf) {
		return pgerr.New(pgerr.UndefinedObject, "no workflow %s is running", id)
	}
	return err
}
