package cli

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"

	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/workflows"
)

// The progress line says rows copied of rows estimated, and while a
// VDiff runs its chunks and differences so far.
func TestProgressLineShowsEstimateAndRunningVDiff(t *testing.T) {
	half, _ := json.Marshal(replicator.DiffReport{Table: "public.orders", Chunks: 7, Counts: map[replicator.DiffKind]int64{replicator.DiffMissing: 1}})
	done, _ := json.Marshal(replicator.DiffReport{Table: "public.customers", Chunks: 3, Done: true})
	p := reshardLive{ReshardProgress: workflows.ReshardProgress{Phase: workflows.PhaseReadyForCutover,
		Copied: map[string]int64{"public.orders": 900}, RowsEstimated: map[string]int64{"public.orders": 1000, "public.customers": 200}},
		copying: 100, diffing: &workflows.DiffTablesResult{Differences: 1,
			Reports: map[string]json.RawMessage{"public.orders": half, "public.customers": done}}}
	line := p.line()
	for _, want := range []string{"rows copied 1000 of ~1200", "VDiff running: tables 1 done of 2 started | chunks 10 | differences 1"} {
		if !strings.Contains(line, want) {
			t.Errorf("line %q lacks %q", line, want)
		}
	}
	p.RowsEstimated, p.diffing = nil, nil
	if line := p.line(); !strings.Contains(line, "rows copied 1000 |") {
		t.Errorf("line without an estimate %q", line)
	}
	if s := diffProgress(&workflows.DiffTablesResult{}); !strings.Contains(s, "consistent point") {
		t.Errorf("a VDiff before its first chunk: %q", s)
	}
}

// A VDiff workflow's report prints its direction and each table.
func TestPrintVDiffReport(t *testing.T) {
	raw, _ := json.Marshal(replicator.DiffReport{Table: "public.orders", Done: true, Chunks: 2, SourceRows: 10, TargetRows: 9,
		Counts:      map[replicator.DiffKind]int64{replicator.DiffMissing: 1},
		Differences: []replicator.Difference{{Kind: replicator.DiffMissing, Key: []string{"7"}, Shard: "s1"}}})
	rep := workflows.VDiffReport{Movement: "reshard-shop-data", Phase: workflows.PhaseDone, MovementPhase: workflows.PhaseSwitched, Reverse: true,
		Result: &workflows.DiffTablesResult{Done: true, Differences: 1, Reports: map[string]json.RawMessage{"public.orders": raw}}}
	var out bytes.Buffer
	if err := printVDiffReport(&out, "vdiff-reshard-shop-data", rep); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"vdiff-reshard-shop-data: VDiff of reshard-shop-data (reverse", "last VDiff 1 differences",
		"  public.orders: missing key (7) on s1\n"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("output lacks %q:\n%s", want, out.String())
		}
	}
	if s := vdiffSummary(rep); !strings.Contains(s, "phase done | movement reshard-shop-data | tables 1 done of 1 started") {
		t.Errorf("summary %q", s)
	}
}
