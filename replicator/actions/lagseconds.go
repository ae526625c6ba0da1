package actions

import (
	"context"
	"log/slog"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"

	"github.com/tesseradb/tessera/workflows"
)

// streamLagSeconds reads, from the calling workflow's running
// StreamChanges activities, each source's lag in seconds: the age of the
// last source commit its stream applied, while it is behind (the stream
// heartbeats it; a slot knows only bytes). Called outside an activity, or
// when Temporal does not answer, it returns nothing: the bytes still
// stand.
func streamLagSeconds(ctx context.Context) map[string]float64 {
	if !activity.IsActivity(ctx) {
		return nil
	}
	info := activity.GetInfo(ctx)
	d, err := activity.GetClient(ctx).DescribeWorkflowExecution(ctx, info.WorkflowExecution.ID, info.WorkflowExecution.RunID)
	if err != nil {
		slog.Debug("reading the streams' heartbeats", "error", err)
		return nil
	}
	out := map[string]float64{}
	dc := converter.GetDefaultDataConverter()
	for _, a := range d.GetPendingActivities() {
		if a.GetActivityType().GetName() != workflows.StreamChangesActivity || a.GetHeartbeatDetails() == nil {
			continue
		}
		var hb workflows.StreamHeartbeat
		if dc.FromPayloads(a.GetHeartbeatDetails(), &hb) == nil && hb.Source != "" {
			out[hb.Source] = max(out[hb.Source], hb.LagSeconds)
		}
	}
	return out
}
