package workflows

import (
	"fmt"
	"strings"
)

// onlineDDLDetails renders a migration as its current details in the
// Temporal UI: the statement, its path and each shard's state.
func onlineDDLDetails(in OnlineDDLInput, p OnlineDDLProgress, step string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "**OnlineDDL on %s**: %s\n\n", in.Database, p.Phase)
	fmt.Fprintf(&b, "```sql\n%s\n```\n\n", in.SQL)
	if p.Plan != nil {
		fmt.Fprintf(&b, "- path: %s (%s)\n", p.Plan.Path, p.Plan.Reason)
	}
	fmt.Fprintf(&b, "- step: %s\n", step)
	if len(p.Shards) > 0 {
		b.WriteString("\n| shard | state | attempts | last error |\n|---|---|---|---|\n")
		for _, s := range p.Shards {
			fmt.Fprintf(&b, "| %s | %s | %d | %s |\n", s.Shard, s.State, s.Attempts, strings.ReplaceAll(s.LastError, "|", "\\|"))
		}
	}
	if c := p.SchemaCheck; c != nil {
		fmt.Fprintf(&b, "\n- schema check: %d differences over %d tables\n", len(c.Differences), c.Tables)
	}
	if p.Error != "" {
		fmt.Fprintf(&b, "- error: %s\n", p.Error)
	}
	return b.String()
}
