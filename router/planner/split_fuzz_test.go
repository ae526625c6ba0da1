package planner

import (
	"testing"

	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// FuzzSplitInsert: whatever the text, splitting never panics, and every
// part it makes is one INSERT that parses, with as many VALUES rows as it
// claims and parameters numbered from $1.
func FuzzSplitInsert(f *testing.F) {
	f.Add("INSERT INTO orders (a, b) VALUES (1, 'x'), (2, 'y') RETURNING a", uint8(2))
	f.Add("INSERT INTO t VALUES ($1, $2), ($3, $2) ON CONFLICT (a) DO UPDATE SET b = $4", uint8(1))
	f.Add("insert into t values ((1), '(('), (2, $$)$$) /* ) */, (3, E'\\')')", uint8(5))
	f.Add("INSERT INTO t (a) VALUES (1)", uint8(0))
	f.Fuzz(func(t *testing.T, sql string, pattern uint8) {
		res, err := pg_query.Parse(sql)
		if err != nil || len(res.Stmts) != 1 {
			return
		}
		ins := res.Stmts[0].Stmt.GetInsertStmt()
		if ins == nil || ins.SelectStmt.GetSelectStmt() == nil {
			return
		}
		n := len(ins.SelectStmt.GetSelectStmt().ValuesLists)
		if n == 0 || n > 64 {
			return
		}
		shards := make([]string, n)
		for i := range shards {
			shards[i] = "s0"
			if pattern>>(i%8)&1 == 1 {
				shards[i] = "s1"
			}
		}
		split, err := SplitInsert(sql, shards)
		if err != nil {
			return
		}
		rows := 0
		for _, part := range split.Parts {
			pr, err := pg_query.Parse(part.SQL)
			if err != nil {
				t.Fatalf("part %q of %q does not parse: %v", part.SQL, sql, err)
			}
			pi := pr.Stmts[0].Stmt.GetInsertStmt()
			if pi == nil || len(pi.SelectStmt.GetSelectStmt().GetValuesLists()) != len(part.Rows) {
				t.Fatalf("part %q of %q is not an INSERT of %d rows", part.SQL, sql, len(part.Rows))
			}
			rows += len(part.Rows)
			for i, orig := range part.Params {
				if orig < 1 || orig > split.NumParams {
					t.Fatalf("part %q: $%d maps to $%d of %d", part.SQL, i+1, orig, split.NumParams)
				}
			}
		}
		if rows != n || len(split.RowPart) != n {
			t.Fatalf("%q: parts hold %d rows of %d", sql, rows, n)
		}
	})
}
