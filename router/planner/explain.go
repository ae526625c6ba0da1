package planner

import (
	"fmt"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"github.com/tesseradb/tessera/pgerr"
)

// EXPLAIN routes like the statement it explains. EXPLAIN (TESSERA) stmt is
// Tessera's own: Postgres's grammar takes any word as an EXPLAIN option,
// so it parses, and the router answers it with Describe's lines.

func (c *planCtx) planExplain(st *Statement, ex *pg_query.ExplainStmt, f *facts) {
	if hasOption(ex.Options, "tessera") {
		st.Kind, st.Route = ExplainTessera, Router
		st.Analyze = hasOption(ex.Options, "analyze")
		off := explainedOffset(st.SQL)
		inner := &Statement{SQL: st.SQL[off:], semiFrom: -1, semiTo: -1}
		c.dispatch(inner, ex.Query, f)
		c.bindKeys(inner, c.start+off)
		c.autoPrepare(inner, f, c.start+off)
		st.Inner = inner
		// Inner's text and keys are bound to this text: a statement of
		// the same shape must be planned afresh.
		c.exact = true
		return
	}
	c.dispatch(st, ex.Query, f)
	st.Kind = Explain
	// The shards' plans are shown one after another, as for any
	// statement that runs on several; nothing is summed.
	st.Merge, st.Engine = MergeRows, nil
	// Without ANALYZE nothing runs; with it the statement does.
	st.ReadOnly = st.ReadOnly || !hasOption(ex.Options, "analyze")
}

// explainedOffset returns the offset of the explained statement in the text
// of EXPLAIN (options) stmt: after the parenthesis that closes the options.
func explainedOffset(sql string) int {
	depth := 0
	for i := 0; i < len(sql); {
		t := nextToken(sql, i)
		if t.kind == tokChar {
			switch sql[i] {
			case '(':
				depth++
			case ')':
				if depth--; depth == 0 {
					start, _ := trimSpace(sql, t.end, len(sql))
					for start < len(sql) && startsComment(sql, start) {
						start, _ = trimSpace(sql, nextToken(sql, start).end, len(sql))
					}
					return start
				}
			}
		}
		i = t.end
	}
	return 0
}

// Describe explains how the router runs the statement, one line per text
// row of EXPLAIN (TESSERA)'s "QUERY PLAN" column: its kind, route, tables
// and keys, then each target shard with the SQL sent to it. For an
// ExplainTessera statement it describes the statement explained. params
// gives a Bind's values (nil for none); without them parameter keys cannot
// be routed and the last line says so.
func (s *Statement) Describe(params Params) []string {
	if s.Kind == ExplainTessera && s.Inner != nil {
		s = s.Inner
	}
	lines := []string{"Statement: " + s.Kind.String()}
	route := "Route: " + s.Route.String()
	if s.Group != "" {
		route += " (group " + s.Group + ")"
	}
	lines = append(lines, route)
	if len(s.Tables) > 0 {
		names := make([]string, len(s.Tables))
		for i, t := range s.Tables {
			names[i] = t.String()
		}
		lines = append(lines, "Tables: "+strings.Join(names, ", "))
	}
	for _, k := range s.Keys {
		lines = append(lines, k.describe(s.PerRow))
	}
	if s.SessionState != 0 {
		lines = append(lines, "Session state: "+s.SessionState.String())
	}
	if s.NoTransaction {
		lines = append(lines, "Cannot run inside a transaction block")
	}
	if s.Auto != nil {
		lines = append(lines, "Prepared form (alone in a simple-protocol Query, outside a transaction): "+s.Auto.describe())
	}
	if s.Route == Gathered {
		return append(lines, s.Gather.describe()...)
	}
	shards, err := s.Shards(params)
	if err != nil && s.Gather != nil && pgerr.Code(err) == pgerr.FeatureNotSupported {
		// Keys reaching several shards: gathered instead.
		return append(lines, s.Gather.describe()...)
	}
	if err == ErrSplitInsert {
		sp, err := s.SplitInsert(params)
		if err != nil {
			return append(lines, "Error: "+pgerr.Code(err)+": "+err.Error())
		}
		lines = append(lines, "Split by row across shards")
		for _, part := range sp.Parts {
			rows := make([]string, len(part.Rows))
			for i, r := range part.Rows {
				rows[i] = fmt.Sprint(r + 1)
			}
			line := "Shard " + part.Shard + " (rows " + strings.Join(rows, ", ")
			if len(part.Params) > 0 {
				ps := make([]string, len(part.Params))
				for i, n := range part.Params {
					ps[i] = fmt.Sprintf("$%d = $%d", i+1, n)
				}
				line += "; " + strings.Join(ps, ", ")
			}
			lines = append(lines, line+"): "+part.SQL)
		}
		return lines
	}
	if err != nil {
		return append(lines, "Error: "+pgerr.Code(err)+": "+err.Error())
	}
	sql := s.SQL
	if s.Merge == MergeEngine && len(shards) > 1 && s.Engine.ShardSQL != "" {
		sql = s.Engine.ShardSQL
	}
	var leaves []string
	for _, sh := range shards {
		leaves = append(leaves, "Shard "+sh+": "+sql)
	}
	if s.Merge == MergeEngine && len(shards) > 1 {
		// The operators the router runs over the shards' rows.
		return append(lines, s.Engine.Describe(leaves)...)
	}
	return append(lines, leaves...)
}

func (k *Key) describe(perRow bool) string {
	v := "$" + fmt.Sprint(k.Param)
	if k.Param == 0 {
		v = string(k.AppendValue(nil))
		if k.Class != IntegerLiteral && k.Class != NumericLiteral {
			v = k.Literal
		}
	}
	line := fmt.Sprintf("Key: %s = %s (%s, shard index %s)", k.Column, v, k.Type, k.Index.Name)
	switch {
	case k.Check:
		line += fmt.Sprintf(", row %d, checked against the row's placement", k.Row+1)
	case k.Separate:
		line += ", of another table: must reach the same one shard"
	case perRow:
		line += fmt.Sprintf(", row %d", k.Row+1)
	}
	return line
}
