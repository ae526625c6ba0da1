package cli

import (
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/tesseradb/tessera/pgerr"
	"github.com/tesseradb/tessera/replicator"
	"github.com/tesseradb/tessera/workflows"
)

func newVDiffCommand() *cobra.Command {
	var tf temporalFlags
	var database, group string
	var asJSON, run bool
	var queue string
	cmd := &cobra.Command{
		Use:   "vdiff --database DB --shard-group GROUP [--run] [--json]",
		Short: "Run a VDiff of a shard group's movement (--run), or show its last: each table's differences",
		Long: `Show the last VDiff the movement of a shard group ran (its reshard, else the
MoveTables into it): for each table the chunks and rows compared and every
difference by key and kind — missing (on its owning target), extra (on a
target, on no source), changed (which columns; NULL and '' differ),
wrong_shard (on a target that does not own its key) and source_duplicate (on
two sources). It reads the movement's progress query.

With --run it starts the VDiff workflow (id vdiff-<movement>) instead, which
asks the running movement for a VDiff now: in phase ready_for_cutover the
sources against the targets, in phase switched the reverse. The movement stops
its streams at a known point, diffs and starts them again. The progress
(tables and chunks done, differences so far) is redrawn in place on a
terminal, printed line by line otherwise; then the report.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if database == "" || group == "" {
				return pgerr.New(pgerr.InvalidParameterValue, "--database and --shard-group are required")
			}
			ctx := cmd.Context()
			c, err := tf.dial(ctx)
			if err != nil {
				return err
			}
			defer c.Close()
			if run {
				rep, err := runVDiff(ctx, cmd.ErrOrStderr(), newLiveLine(cmd.ErrOrStderr()), c, queue, database, group)
				if err != nil {
					return err
				}
				if asJSON {
					return printResult(cmd.OutOrStdout(), true, rep, nil)
				}
				return printVDiffReport(cmd.OutOrStdout(), workflows.VDiffID(rep.Movement), rep)
			}
			id, err := runningMovement(ctx, c, database, group)
			if err != nil {
				// A finished movement's last progress is still queryable.
				id = workflows.ReshardID(database, group)
			}
			p, err := reshardProgress(ctx, c, id, "")
			if err != nil {
				return workflowError(id, notFound(id, err))
			}
			if asJSON {
				return printResult(cmd.OutOrStdout(), true, p.LastDiff, nil)
			}
			return printDiff(cmd.OutOrStdout(), id, p.ReshardProgress)
		},
	}
	tf.register(cmd, nil)
	cmd.Flags().StringVar(&database, "database", "", "the database")
	cmd.Flags().StringVar(&group, "shard-group", "", "the shard group being resharded, or moved into")
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the VDiff's result as JSON (null before the first VDiff; with --run the VDiff workflow's report)")
	cmd.Flags().BoolVar(&run, "run", false, "run a VDiff now (the VDiff workflow) and show its progress and report")
	cmd.Flags().StringVar(&queue, "task-queue", workflows.TaskQueue, "the task queue of the workers that run the VDiff workflow")
	return cmd
}

// printDiff prints a reshard's last VDiff table by table.
func printDiff(w io.Writer, id string, p workflows.ReshardProgress) error {
	d := p.LastDiff
	if d == nil {
		fmt.Fprintf(w, "%s (phase %s) has run no VDiff yet: it runs once the streams have caught up\n", id, p.Phase)
		return nil
	}
	fmt.Fprintf(w, "%s (phase %s): last VDiff %s\n", id, p.Phase, diffLine(d))
	tables := make([]string, 0, len(d.Reports))
	for t := range d.Reports {
		tables = append(tables, t)
	}
	sort.Strings(tables)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TABLE\tDONE\tCHUNKS\tSOURCE ROWS\tTARGET ROWS\tDIFFERENCES")
	reports := make([]replicator.DiffReport, len(tables))
	for i, t := range tables {
		if err := json.Unmarshal(d.Reports[t], &reports[i]); err != nil {
			return fmt.Errorf("the VDiff report of %s: %w", t, err)
		}
		r := &reports[i]
		fmt.Fprintf(tw, "%s\t%v\t%d\t%d\t%d\t%s\n", t, r.Done, r.Chunks, r.SourceRows, r.TargetRows, countsLine(r))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for i, r := range reports {
		for _, diff := range r.Differences {
			fmt.Fprintf(w, "  %s: %s key (%s) on %s", tables[i], diff.Kind, strings.Join(diff.Key, ", "), diff.Shard)
			if len(diff.Columns) > 0 {
				fmt.Fprintf(w, ", columns %s", strings.Join(diff.Columns, ", "))
			}
			fmt.Fprintln(w)
		}
		if r.Unlisted > 0 {
			fmt.Fprintf(w, "  %s: %d more differences not listed\n", tables[i], r.Unlisted)
		}
	}
	return nil
}

// countsLine is a report's differences by kind, e.g. "2 (missing 1, extra 1)".
func countsLine(r *replicator.DiffReport) string {
	if r.Total() == 0 {
		return "0"
	}
	kinds := make([]string, 0, len(r.Counts))
	for k, n := range r.Counts {
		kinds = append(kinds, fmt.Sprintf("%s %d", k, n))
	}
	sort.Strings(kinds)
	return fmt.Sprintf("%d (%s)", r.Total(), strings.Join(kinds, ", "))
}
