package planner

import (
	"slices"
	"strconv"
	"strings"

	pg_query "github.com/pganalyze/pg_query_go/v6"
	"google.golang.org/protobuf/proto"

	"github.com/tesseradb/tessera/pgerr"
)

// A multi-row INSERT ... VALUES whose rows land on different shards runs
// as one INSERT per shard holding that shard's rows, in their order. The
// plan only says whether the statement may be split (Shards then fails
// with ErrSplitInsert); the split itself is made at execution, from the
// statement's text and the shard each row goes to, because it depends on
// the values (literals of a cached plan's text, or Bind parameters).

// ErrSplitInsert is the error Shards returns for a multi-row INSERT whose
// rows reach several shards and that SplitInsert can split. A caller that
// does not split sees an ordinary 0A000.
var ErrSplitInsert = unsupported("multi-row INSERT across shards must be split by row")

// InsertSplit is a multi-row INSERT split by shard.
type InsertSplit struct {
	// Parts are the shards' statements, in the order the shards first
	// appear among the rows.
	Parts []InsertPart
	// RowPart gives, for each VALUES row, the index in Parts of the part
	// that holds it.
	RowPart []int
	// Returning reports a RETURNING clause: each part returns one row per
	// VALUES row it holds, in its order (ON CONFLICT DO NOTHING and
	// DO UPDATE ... WHERE, which may return fewer, are not split).
	Returning bool
	// NumParams is the highest parameter number ($n) in the statement.
	NumParams int
}

// InsertPart is one shard's INSERT.
type InsertPart struct {
	Shard string
	// SQL is the statement with only this shard's rows: the text before
	// the first row and after the last (ON CONFLICT, RETURNING) as
	// written, the rows joined by ", ", parameters renumbered $1, $2, ...
	// in order of first appearance.
	SQL string
	// Rows are the 0-based VALUES rows of the original statement, in
	// order.
	Rows []int
	// Params maps the part's parameters to the original's: $i of SQL is
	// the original $Params[i-1].
	Params []int
}

// splitProblem says why a multi-row INSERT cannot be split by row, or "".
func splitProblem(ins *pg_query.InsertStmt) string {
	sel := ins.SelectStmt.GetSelectStmt()
	switch {
	case ins.WithClause != nil:
		return "with a WITH clause"
	case sel == nil || len(sel.ValuesLists) == 0:
		return "from a SELECT"
	case sel.WithClause != nil || len(sel.SortClause) > 0 || sel.LimitCount != nil || sel.LimitOffset != nil || len(sel.LockingClause) > 0:
		return "with WITH, ORDER BY, LIMIT or OFFSET on its VALUES"
	}
	if len(ins.ReturningList) == 0 {
		return ""
	}
	sub := false
	for _, n := range ins.ReturningList {
		walk(n.ProtoReflect(), func(m proto.Message) bool {
			if _, ok := m.(*pg_query.SubLink); ok {
				sub = true
			}
			return !sub
		})
	}
	if sub {
		return "with a subquery in RETURNING"
	}
	if oc := ins.OnConflictClause; oc != nil {
		switch {
		case oc.Action == pg_query.OnConflictAction_ONCONFLICT_NOTHING:
			return "with ON CONFLICT DO NOTHING and RETURNING (the rows returned could not be matched to the VALUES rows)"
		case oc.WhereClause != nil:
			return "with ON CONFLICT DO UPDATE ... WHERE and RETURNING (the rows returned could not be matched to the VALUES rows)"
		}
	}
	return ""
}

func splitRefused(why string) error {
	return unsupported("multi-row INSERT across shards is not supported %s", why)
}

// RowShards returns the shard each VALUES row of an INSERT goes to, with
// the alternate-index checks Shards makes.
func (s *Statement) RowShards(params Params) ([]string, error) {
	if s.Err != nil {
		return nil, s.Err
	}
	if s.Route != Shard || !s.PerRow {
		return nil, pgerr.New(pgerr.InternalError, "planner: RowShards of a statement that is not a keyed INSERT")
	}
	n := 0
	for i := range s.Keys {
		n = max(n, s.Keys[i].Row+1)
	}
	out := make([]string, n)
	err := s.eachKey(params, func(k *Key, shard string) { out[k.Row] = shard })
	if err != nil {
		return nil, err
	}
	return out, nil
}

// SplitInsert splits a multi-row INSERT whose rows reach several shards
// (Shards failed with ErrSplitInsert) by the shard of each row.
func (s *Statement) SplitInsert(params Params) (*InsertSplit, error) {
	if s.Err != nil {
		return nil, s.Err
	}
	if s.multiShard != ErrSplitInsert {
		if s.multiShard != nil {
			return nil, s.multiShard
		}
		return nil, pgerr.New(pgerr.InternalError, "planner: SplitInsert of a statement that cannot be split")
	}
	rows, err := s.RowShards(params)
	if err != nil {
		return nil, err
	}
	return SplitInsert(s.SQL, rows)
}

// paramRef is a $n token of the text.
type paramRef struct {
	start, end, num int
}

// SplitInsert splits the text of one INSERT ... VALUES statement into one
// statement per shard, given the shard of each VALUES row. It re-parses
// sql: a row's text spans from its '(' to the matching ')', found with
// Postgres's own scanner, and parameters are renumbered by their
// locations. It refuses (0A000) what it cannot split safely.
func SplitInsert(sql string, rowShards []string) (*InsertSplit, error) {
	res, err := pg_query.Parse(sql)
	if err != nil {
		return nil, syntaxError(err)
	}
	if len(res.Stmts) != 1 || res.Stmts[0].Stmt.GetInsertStmt() == nil {
		return nil, splitRefused("in this statement (not a single INSERT)")
	}
	root := res.Stmts[0].Stmt
	ins := root.GetInsertStmt()
	if why := splitProblem(ins); why != "" {
		return nil, splitRefused(why)
	}
	values := ins.SelectStmt.GetSelectStmt().ValuesLists
	if len(values) != len(rowShards) {
		return nil, pgerr.New(pgerr.InternalError, "planner: %d shards for %d VALUES rows", len(rowShards), len(values))
	}
	spans, err := rowSpans(sql, len(values))
	if err != nil {
		return nil, err
	}

	// Every location under a row must be inside its span: the scanner and
	// the parser agree on where the rows are.
	var refs []paramRef
	var bad bool
	walk(root.ProtoReflect(), func(m proto.Message) bool {
		if p, ok := m.(*pg_query.ParamRef); ok {
			start := int(p.Location)
			end := start + 1
			for end < len(sql) && sql[end] >= '0' && sql[end] <= '9' {
				end++
			}
			// $0 parses but names no parameter: Postgres refuses it, and
			// no renumbering can keep that.
			if p.Number < 1 || start < 0 || start >= len(sql) || sql[start] != '$' || sql[start+1:end] != strconv.Itoa(int(p.Number)) {
				bad = true
			}
			refs = append(refs, paramRef{start: start, end: end, num: int(p.Number)})
		}
		return true
	})
	for r, row := range values {
		walk(row.ProtoReflect(), func(m proto.Message) bool {
			loc := int32(-1)
			switch x := m.(type) {
			case *pg_query.ParamRef:
				loc = x.Location
			case *pg_query.A_Const:
				loc = x.Location
			case *pg_query.ColumnRef:
				loc = x.Location
			case *pg_query.FuncCall:
				loc = x.Location
			}
			if loc >= 0 && (int(loc) < spans[r][0] || int(loc) >= spans[r][1]) {
				bad = true
			}
			return true
		})
	}
	if bad {
		return nil, splitRefused("here (its text could not be split by row)")
	}
	slices.SortFunc(refs, func(a, b paramRef) int { return a.start - b.start })

	sp := &InsertSplit{RowPart: make([]int, len(values)), Returning: len(ins.ReturningList) > 0}
	for _, p := range refs {
		sp.NumParams = max(sp.NumParams, p.num)
	}
	for r, shard := range rowShards {
		at := -1
		for i := range sp.Parts {
			if sp.Parts[i].Shard == shard {
				at = i
				break
			}
		}
		if at < 0 {
			at = len(sp.Parts)
			sp.Parts = append(sp.Parts, InsertPart{Shard: shard})
		}
		sp.Parts[at].Rows = append(sp.Parts[at].Rows, r)
		sp.RowPart[r] = at
	}
	first, last := spans[0][0], spans[len(spans)-1][1]
	for i := range sp.Parts {
		part := &sp.Parts[i]
		var b strings.Builder
		b.Grow(len(sql))
		renumber := func(from, to int) {
			at := from
			for _, p := range refs {
				if p.start < from || p.start >= to {
					continue
				}
				n := slices.Index(part.Params, p.num)
				if n < 0 {
					part.Params = append(part.Params, p.num)
					n = len(part.Params) - 1
				}
				b.WriteString(sql[at:p.start])
				b.WriteByte('$')
				b.WriteString(strconv.Itoa(n + 1))
				at = p.end
			}
			b.WriteString(sql[at:to])
		}
		renumber(0, first)
		for j, r := range part.Rows {
			if j > 0 {
				b.WriteString(", ")
			}
			renumber(spans[r][0], spans[r][1])
		}
		renumber(last, len(sql))
		part.SQL = b.String()
	}
	return sp, nil
}

// rowSpans finds the byte spans of the n VALUES rows of an INSERT: from
// each row's '(' to its matching ')', after the VALUES keyword.
func rowSpans(sql string, n int) ([][2]int, error) {
	fail := splitRefused("here (its VALUES rows could not be found in its text)")
	sc, err := pg_query.Scan(sql)
	if err != nil {
		return nil, fail
	}
	var toks []*pg_query.ScanToken
	for _, t := range sc.Tokens {
		if t.Token != pg_query.Token_SQL_COMMENT && t.Token != pg_query.Token_C_COMMENT {
			toks = append(toks, t)
		}
	}
	i := slices.IndexFunc(toks, func(t *pg_query.ScanToken) bool { return t.Token == pg_query.Token_VALUES })
	if i < 0 {
		return nil, fail
	}
	i++
	spans := make([][2]int, 0, n)
	for len(spans) < n {
		if len(spans) > 0 {
			if i >= len(toks) || toks[i].Token != pg_query.Token_ASCII_44 { // ','
				return nil, fail
			}
			i++
		}
		if i >= len(toks) || toks[i].Token != pg_query.Token_ASCII_40 { // '('
			return nil, fail
		}
		start, depth := int(toks[i].Start), 0
		for ; i < len(toks); i++ {
			switch toks[i].Token {
			case pg_query.Token_ASCII_40:
				depth++
			case pg_query.Token_ASCII_41:
				depth--
			}
			if depth == 0 {
				break
			}
		}
		if i >= len(toks) {
			return nil, fail
		}
		spans = append(spans, [2]int{start, int(toks[i].End)})
		i++
	}
	// What follows the last row must not be another row.
	if i < len(toks) && toks[i].Token == pg_query.Token_ASCII_44 {
		return nil, fail
	}
	return spans, nil
}
