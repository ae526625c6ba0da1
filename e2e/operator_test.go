package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/tesseradb/tessera/cli"
	"github.com/tesseradb/tessera/workflows"
)

// tessera runs the tessera command in-process against the package's
// Temporal server and returns its stdout, stderr and exit code.
func tessera(t *testing.T, args ...string) (string, string) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	// The commands look the shard up in etcd before they start anything.
	args = append(args, "--temporal", temporalSrv.FrontendAddr(),
		"--etcd", strings.Join(cluster.Info().Etcd, ","), "--cluster", cluster.Info().Cluster)
	if code := cli.Run(args, &stdout, &stderr, cli.Options{}); code != 0 {
		t.Fatalf("tessera %s: exit %d\nstdout: %s\nstderr: %s", strings.Join(args, " "), code, stdout.String(), stderr.String())
	}
	return stdout.String(), stderr.String()
}

// TestOperatorCommands: `tessera durability`, `tessera failover` and a
// scheduled `tessera switchover` drive the workflows on a real server.
func TestOperatorCommands(t *testing.T) {
	startWorker(t, "e2e-operator", true)
	before := settled(t)

	out, steps := tessera(t, "durability", "--shard", shard, "--policy", "async")
	if s, err := instanceStatus(t, before.Primary); err != nil || s.SynchronousStandbyNames != "" {
		t.Fatalf("after tessera durability async: %v, %v\nstdout %s\nsteps %s", s, err, out, steps)
	}
	tessera(t, "durability", "--shard", shard, "--policy", "sync")
	if s, err := instanceStatus(t, before.Primary); err != nil || s.SynchronousStandbyNames == "" {
		t.Fatalf("after tessera durability sync: %v, %v", s, err)
	}

	out, steps = tessera(t, "failover", "--shard", shard, "--force", "--json")
	var res workflows.FailoverResult
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("tessera failover --json printed %q: %v", out, err)
	}
	if !strings.Contains(steps, "started workflow failover-"+shard) || !strings.Contains(strings.Join(res.Steps, "\n"), "promoting") ||
		res.OldPrimary != before.Primary || res.NewPrimary == before.Primary {
		t.Fatalf("tessera failover: result %+v; steps printed:\n%s", res, steps)
	}
	// Watched in the Temporal UI: its summary and its last phase.
	show, _, code := runCLI(context.Background(), "workflow", "show", "failover-"+shard)
	for _, want := range []string{"type:      Failover\n", "status:    completed\n", "phase:     done\n",
		"summary:   Failover of shard " + shard + " (forced): requested by an operator\n"} {
		if code != 0 || !strings.Contains(show, want) {
			t.Errorf("workflow show failover-%s: exit %d, lacks %q:\n%s", shard, code, want, show)
		}
	}
	awaitRejoined(t, before.Primary, 90*time.Second)
	mid := settled(t)

	at := time.Now().Add(4 * time.Second).UTC().Truncate(time.Second).Format(time.RFC3339)
	out, _ = tessera(t, "switchover", "--shard", shard, "--at", at)
	if !strings.Contains(out, "temporal schedule create") {
		t.Fatalf("tessera switchover --at printed no equivalent command:\n%s", out)
	}
	t.Logf("%s", out)
	eventually(t, 60*time.Second, "the scheduled switchover moves the primary", func() error {
		if st := shardState(t); st.Primary == mid.Primary || st.Buffer != nil {
			return fmt.Errorf("state %+v", st)
		}
		return nil
	})
	// The schedule's run is listed with its summary, found by its phase.
	// Its id is the schedule's workflow id and a time, which tells it from
	// the other tests' switchovers of the shard.
	done := listed(t, fmt.Sprintf(`WorkflowType = "%s" AND %s = "%s" AND WorkflowId STARTS_WITH "%s-"`,
		workflows.SwitchoverName, workflows.PhaseAttribute, workflows.PhaseDone, workflows.SwitchoverID(shard)))
	d, err := tc.DescribeWorkflow(context.Background(), done[0].GetExecution().GetWorkflowId(), done[0].GetExecution().GetRunId())
	if err != nil {
		t.Fatal(err)
	}
	if s, err := d.GetStaticSummary(); err != nil || s != "Switchover of shard "+shard+": primary to the best replica" {
		t.Errorf("the scheduled switchover's summary: %q, %v", s, err)
	}
	awaitRejoined(t, mid.Primary, 90*time.Second)
}
