package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"go.temporal.io/sdk/client"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/workflows"
)

func newSwitchoverCommand() *cobra.Command {
	var f opFlags
	var in workflows.SwitchoverInput
	var at, cron string
	cmd := &cobra.Command{
		Use:   "switchover --shard SHARD [--candidate INSTANCE] [--at RFC3339 | --cron SPEC]",
		Short: "Move a healthy shard's primary to a replica (the Switchover workflow)",
		Long: `Start the Switchover workflow of a shard and follow its steps: routers hold the
shard's new statements, the old primary is fenced, the candidate (--candidate,
or the best replica) replays everything and is promoted and published, routers
resume, and the old primary is rewound into a replica. No commit is lost; if
anything fails before the promotion, the old primary is made writable again.

With --at or --cron nothing runs now: a Temporal schedule is created that
starts the switchover then (once for --at, on every match of --cron), and its
id is printed with the equivalent temporal CLI command.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := f.check(); err != nil {
				return err
			}
			in.Shard = f.shard
			if at != "" || cron != "" {
				return scheduleSwitchover(cmd, &f, in, at, cron)
			}
			return runOp(cmd, &f, workflows.SwitchoverID(f.shard), workflows.SwitchoverName, in, func(w io.Writer, r workflows.SwitchoverResult) {
				fmt.Fprintf(w, "shard %s: primary %s -> %s (term %d); statements held %dms\n",
					f.shard, r.OldPrimary, r.NewPrimary, r.Term, r.PauseMillis)
				printSteps(w, r.Steps)
			})
		},
	}
	f.register(cmd)
	fl := cmd.Flags()
	fl.StringVar(&in.Candidate, "candidate", "", "the replica to promote (default: the best one)")
	fl.StringVar(&at, "at", "", "schedule the switchover once, at this RFC 3339 time (e.g. 2026-03-05T02:00:00Z)")
	fl.StringVar(&cron, "cron", "", `schedule the switchover on a cron spec (e.g. "0 2 * * SUN", UTC)`)
	cmd.MarkFlagsMutuallyExclusive("at", "cron")
	return cmd
}

// scheduleSwitchover creates a Temporal schedule whose action is the
// switchover, and prints its id and the equivalent temporal command.
func scheduleSwitchover(cmd *cobra.Command, f *opFlags, in workflows.SwitchoverInput, at, cron string) error {
	opts := client.ScheduleOptions{Spec: client.ScheduleSpec{TimeZoneName: "UTC"}}
	var specFlag string
	if at != "" {
		when, err := time.Parse(time.RFC3339, at)
		if err != nil {
			return pgerr.New(pgerr.InvalidDatetimeFormat, "--at %q: want an RFC 3339 time such as 2026-03-05T02:00:00Z", at)
		}
		if !when.After(time.Now()) {
			return pgerr.New(pgerr.InvalidParameterValue, "--at %s is not in the future", at)
		}
		when = when.UTC()
		one := func(v int) []client.ScheduleRange { return []client.ScheduleRange{{Start: v}} }
		opts.Spec.Calendars = []client.ScheduleCalendarSpec{{
			Second: one(when.Second()), Minute: one(when.Minute()), Hour: one(when.Hour()),
			DayOfMonth: one(when.Day()), Month: one(int(when.Month())), Year: one(when.Year()),
		}}
		// A calendar with a year matches once; the limit makes that explicit.
		opts.RemainingActions = 1
		opts.ID = fmt.Sprintf("%s-at-%s", workflows.SwitchoverID(in.Shard), when.Format("20060102T150405Z"))
		cal, _ := json.Marshal(map[string]string{
			"year": fmt.Sprint(when.Year()), "month": fmt.Sprint(int(when.Month())), "dayOfMonth": fmt.Sprint(when.Day()),
			"hour": fmt.Sprint(when.Hour()), "minute": fmt.Sprint(when.Minute()), "second": fmt.Sprint(when.Second()),
		})
		specFlag = "--calendar " + shellQuote(string(cal)) + " --remaining-actions 1"
	} else {
		opts.Spec.CronExpressions = []string{cron}
		opts.ID = workflows.SwitchoverID(in.Shard) + "-cron"
		specFlag = "--cron " + shellQuote(cron)
	}
	// Temporal appends the scheduled time to this id for each run, so
	// scheduled switchovers do not share the id of one started by hand.
	opts.Action = &client.ScheduleWorkflowAction{
		ID:        workflows.SwitchoverID(in.Shard),
		Workflow:  workflows.SwitchoverName,
		Args:      []any{in},
		TaskQueue: workflows.TaskQueue,
		// Listed in the UI like a switchover started by hand.
		StaticSummary: in.Summary(),
	}
	ctx := cmd.Context()
	if err := f.requireShard(ctx); err != nil {
		return err
	}
	c, err := f.temporal.dial(ctx)
	if err != nil {
		return err
	}
	defer c.Close()
	if _, err := c.ScheduleClient().Create(ctx, opts); err != nil {
		return fmt.Errorf("creating schedule %s: %w", opts.ID, err)
	}
	input, _ := json.Marshal(in)
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "schedule %s created\n", opts.ID)
	fmt.Fprintf(out, "equivalent: temporal schedule create --address %s --namespace %s --schedule-id %s %s --workflow-id %s --task-queue %s --type %s --input %s\n",
		f.temporal.address(), f.temporal.namespace, opts.ID, specFlag, workflows.SwitchoverID(in.Shard),
		workflows.TaskQueue, workflows.SwitchoverName, shellQuote(string(input)))
	fmt.Fprintf(out, "delete it with: temporal schedule delete --address %s --namespace %s --schedule-id %s\n",
		f.temporal.address(), f.temporal.namespace, opts.ID)
	return nil
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }
