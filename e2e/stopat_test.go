package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"

	"github.com/tesseradb/tessera/topo/store"
)

// stopAtStep stops a worker process inside a given step: when an
// activity of the type its file names has done its work, the worker
// prints "stopped at <type>" and blocks, before it reports the result,
// until the test kills it. The step's effects are then made and not
// recorded: the hardest moment for a worker to die.
type stopAtStep struct {
	interceptor.WorkerInterceptorBase
	file string
}

func (s *stopAtStep) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	return &stopAtActivity{ActivityInboundInterceptorBase: interceptor.ActivityInboundInterceptorBase{Next: next}, file: s.file}
}

type stopAtActivity struct {
	interceptor.ActivityInboundInterceptorBase
	file string
}

func (a *stopAtActivity) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	res, err := a.Next.ExecuteActivity(ctx, in)
	if a.stopHere(ctx, err) {
		fmt.Printf("stopped at %s\n", activity.GetInfo(ctx).ActivityType.Name)
		os.Stdout.Sync()
		select {}
	}
	return res, err
}

func (a *stopAtActivity) stopHere(ctx context.Context, err error) bool {
	if err != nil {
		return false // a stream cancelled, a step refused: not the step's work done
	}
	armed, _ := os.ReadFile(a.file)
	return strings.TrimSpace(string(armed)) == activity.GetInfo(ctx).ActivityType.Name
}

// stepProc is a worker or Replicator process that stops inside the step
// its arm file names.
type stepProc struct {
	cmd  *exec.Cmd
	name string
	// again starts a process like this one.
	again func() *stepProc
}

// stepStop is a process stopped in a step.
type stepStop struct {
	proc *stepProc
	step string
}

// startStepProc starts the test binary as the process env's JSON spec
// describes, which registers as id of kind and sends its stops to stops,
// and waits until it has registered.
func (rc *reshardCluster) startStepProc(t *testing.T, stops chan<- stepStop, env string, spec any, kind store.Kind, id string) *stepProc {
	t.Helper()
	cfg, _ := json.Marshal(spec)
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), env+"="+string(cfg))
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	p := &stepProc{cmd: cmd, name: id}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			if step, ok := strings.CutPrefix(sc.Text(), "stopped at "); ok {
				stops <- stepStop{p, step}
			}
		}
	}()
	eventually(t, 30*time.Second, string(kind)+" process "+id+" registers", func() error {
		recs, err := rc.c.Store().ListRecords(context.Background(), kind)
		if err != nil {
			return err
		}
		for _, r := range recs {
			if r.ID == id {
				return nil
			}
		}
		return fmt.Errorf("no %s %s yet", kind, id)
	})
	return p
}

// kill SIGKILLs the process.
func (p *stepProc) kill(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	p.cmd.Wait()
}

// startedActivity reports whether the server sees an attempt of an
// activity of type name running (started, not finished) in the
// workflow, and which attempt.
func startedActivity(t *testing.T, ctx context.Context, id, name string) (int32, bool) {
	t.Helper()
	d, err := tc.DescribeWorkflowExecution(ctx, id, "")
	if err != nil {
		t.Fatal(err)
	}
	for _, a := range d.PendingActivities {
		if a.ActivityType.GetName() == name && a.State == enumspb.PENDING_ACTIVITY_STATE_STARTED {
			return a.Attempt, true
		}
	}
	return 0, false
}

// timeline lists the workflow's history events from since on, one
// "+seconds type[activity]" each: where a kill's recovery spent its time.
func timeline(t *testing.T, ctx context.Context, id string, since time.Time) string {
	t.Helper()
	var out []string
	names := map[int64]string{}
	it := tc.GetWorkflowHistory(ctx, id, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		e, err := it.Next()
		if err != nil {
			t.Fatal(err)
		}
		if a := e.GetActivityTaskScheduledEventAttributes(); a != nil {
			names[e.EventId] = a.ActivityType.GetName()
		}
		at := e.EventTime.AsTime()
		if at.Before(since) {
			continue
		}
		name := strings.TrimPrefix(e.EventType.String(), "EVENT_TYPE_")
		var sched int64
		switch {
		case e.GetActivityTaskStartedEventAttributes() != nil:
			sched = e.GetActivityTaskStartedEventAttributes().ScheduledEventId
			name += fmt.Sprintf("#%d", e.GetActivityTaskStartedEventAttributes().Attempt)
		case e.GetActivityTaskCompletedEventAttributes() != nil:
			sched = e.GetActivityTaskCompletedEventAttributes().ScheduledEventId
		case e.GetActivityTaskFailedEventAttributes() != nil:
			sched = e.GetActivityTaskFailedEventAttributes().ScheduledEventId
		case e.GetActivityTaskTimedOutEventAttributes() != nil:
			sched = e.GetActivityTaskTimedOutEventAttributes().ScheduledEventId
		case e.GetActivityTaskScheduledEventAttributes() != nil:
			sched = e.EventId
		}
		if sched != 0 {
			name += "[" + names[sched] + "]"
		}
		out = append(out, fmt.Sprintf("+%.1f %s", at.Sub(since).Seconds(), name))
	}
	return strings.Join(out, ", ")
}
