package fidelity_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	pg_query "github.com/pganalyze/pg_query_go/v6"
)

// answer is everything a client sees of one statement's result: the
// RowDescription, the rows as sent (text or binary, as the protocol
// chose), the command tag, or the error's SQLSTATE.
type answer struct {
	fields []string   // name, type OID and typmod of each column
	rows   [][]string // each value as sent, "NULL" for NULL
	tag    string
	code   string // SQLSTATE, "" on success
	msg    string
}

// askMany sends a query string of several statements in one Query
// message and records every result: each row and column description
// carries its statement's number, the tags are joined, and the error is
// the first one, which ends the string.
func askMany(ctx context.Context, conn *pgx.Conn, sql string) answer {
	var a answer
	results, err := conn.PgConn().Exec(ctx, sql).ReadAll()
	var tags []string
	for i, r := range results {
		for _, f := range r.FieldDescriptions {
			a.fields = append(a.fields, fmt.Sprintf("%d.%s:%s:%d", i, f.Name, typeOID(f.DataTypeOID), f.TypeModifier))
		}
		for _, raw := range r.Rows {
			row := []string{fmt.Sprint(i)}
			for _, v := range raw {
				row = append(row, value(v))
			}
			a.rows = append(a.rows, row)
		}
		tags = append(tags, r.CommandTag.String())
		if r.Err != nil && err == nil {
			err = r.Err
		}
	}
	a.tag = strings.Join(tags, "; ")
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			a.code, a.msg = pe.Code, pe.Message
		} else {
			a.code, a.msg = "client", err.Error()
		}
	}
	return a
}

func typeOID(oid uint32) string {
	if oid >= firstNormalObjectID {
		// A type made in the database (a table's row type): its OID is
		// the database's own, never the reference's.
		return "user"
	}
	return fmt.Sprint(oid)
}

func value(v []byte) string {
	if v == nil {
		return "NULL"
	}
	return fmt.Sprintf("%q", v)
}

// firstNormalObjectID is where the OIDs of objects made after initdb
// start (FirstNormalObjectId).
const firstNormalObjectID = 16384

// ask runs sql on conn in mode and records its answer.
func ask(ctx context.Context, conn *pgx.Conn, sql string, mode pgx.QueryExecMode, args ...any) answer {
	if mode == pgx.QueryExecModeSimpleProtocol && len(args) == 0 && strings.Contains(sql, ";") {
		return askMany(ctx, conn, sql)
	}
	var a answer
	rows, err := conn.Query(ctx, sql, append([]any{mode}, args...)...)
	if err == nil {
		for _, f := range rows.FieldDescriptions() {
			a.fields = append(a.fields, fmt.Sprintf("%s:%s:%d", f.Name, typeOID(f.DataTypeOID), f.TypeModifier))
		}
		for rows.Next() {
			raw := rows.RawValues()
			row := make([]string, len(raw))
			for i, v := range raw {
				row[i] = value(v)
			}
			a.rows = append(a.rows, row)
		}
		rows.Close()
		err = rows.Err()
		a.tag = rows.CommandTag().String()
	}
	if err != nil {
		var pe *pgconn.PgError
		if errors.As(err, &pe) {
			a.code, a.msg = pe.Code, pe.Message
		} else {
			a.code, a.msg = "client", err.Error()
		}
	}
	return a
}

// probe asks the reference a question of the harness's own (a statement
// rewritten to read its order): inside a transaction, under a savepoint,
// so that its failure does not end the transaction the corpus runs.
func probe(ctx context.Context, ref *pgx.Conn, sql string, mode pgx.QueryExecMode, args ...any) answer {
	if ref.PgConn().TxStatus() == 'I' {
		return ask(ctx, ref, sql, mode, args...)
	}
	if _, err := ref.Exec(ctx, "SAVEPOINT tessera_probe"); err != nil {
		return answer{code: "client", msg: err.Error()}
	}
	a := ask(ctx, ref, sql, mode, args...)
	if _, err := ref.Exec(ctx, "ROLLBACK TO SAVEPOINT tessera_probe"); err != nil {
		return answer{code: "client", msg: err.Error()}
	}
	return a
}

// ordering is what a statement's top-level ORDER BY lets the harness
// check. keys holds, for each row of the reference's answer, the values
// of its sort keys: rows must come in runs of equal keys, each run the
// same multiset of rows as the reference's at the same positions. nil
// keys: rows compare as multisets (no ORDER BY), or only their number
// (a LIMIT without ORDER BY, or an ORDER BY the harness cannot read).
type ordering struct {
	keys []string
	// all is the reference's answer without the LIMIT and OFFSET, when
	// keys cannot say which rows they keep: any rows of it may answer.
	all     [][]string
	sorted  bool // the statement has a top-level ORDER BY
	limited bool // LIMIT or FETCH FIRST: the last run may be cut
	offset  bool // OFFSET: the first run may be cut
}

// orderOf reads the top-level ORDER BY, LIMIT and OFFSET of sql and the
// reference's answer to it. A sort key naming an output column (by a bare
// name unique among the columns, or by position) is read from the
// answer; for other keys (expressions, qualified columns) the reference
// answers sql again with the keys added to its output.
func orderOf(ctx context.Context, ref *pgx.Conn, mode pgx.QueryExecMode, st statement, want answer) ordering {
	var o ordering
	tree, err := pg_query.Parse(st.sql)
	if err != nil || len(tree.Stmts) != 1 || want.code != "" {
		return o
	}
	s := tree.Stmts[0].Stmt.GetSelectStmt()
	if s == nil {
		return o
	}
	o.limited = s.LimitCount != nil
	o.offset = s.LimitOffset != nil
	o.sorted = len(s.SortClause) > 0
	if o.limited || o.offset {
		// Kept for when the keys cannot be read; parsed again, since the
		// keys' reading below changes the tree.
		o.all = unlimited(ctx, ref, mode, st)
	}
	if !o.sorted {
		return o
	}
	names := make([]string, len(want.fields))
	for i, f := range want.fields {
		names[i] = f[:strings.LastIndexByte(f[:strings.LastIndexByte(f, ':')], ':')]
	}
	cols := make([]int, len(s.SortClause)) // output column, or -1
	extra := 0
	for i, n := range s.SortClause {
		cols[i] = -1
		switch x := n.GetSortBy().GetNode().GetNode().(type) {
		case *pg_query.Node_AConst:
			if v, ok := x.AConst.Val.(*pg_query.A_Const_Ival); ok && v.Ival.Ival >= 1 && int(v.Ival.Ival) <= len(names) {
				cols[i] = int(v.Ival.Ival) - 1
			}
		case *pg_query.Node_ColumnRef:
			if f := x.ColumnRef.Fields; len(f) == 1 && f[0].GetString_() != nil {
				name := f[0].GetString_().GetSval()
				if j := slices.Index(names, name); j >= 0 && slices.Index(names[j+1:], name) < 0 {
					cols[i] = j
				}
			}
		}
		if cols[i] < 0 {
			extra++
		}
	}
	rows, fields := want.rows, want.fields
	if extra > 0 {
		// Only a plain SELECT takes more output columns without
		// changing its answer.
		if s.Op != pg_query.SetOperation_SETOP_NONE || len(s.DistinctClause) > 0 {
			return o
		}
		next := len(names)
		for i, n := range s.SortClause {
			if cols[i] < 0 {
				s.TargetList = append(s.TargetList, &pg_query.Node{Node: &pg_query.Node_ResTarget{ResTarget: &pg_query.ResTarget{
					Name: fmt.Sprintf("tessera_sort_%d", i), Val: n.GetSortBy().GetNode()}}})
				cols[i] = next
				next++
			}
		}
		augmented, err := pg_query.Deparse(tree)
		if err != nil {
			return o
		}
		a := probe(ctx, ref, augmented, mode, st.args...)
		if a.code != "" || len(a.rows) != len(want.rows) {
			return o
		}
		rows, fields = a.rows, a.fields
	}
	o.keys = make([]string, len(rows))
	for r, row := range rows {
		k := make([]string, len(cols))
		for i, c := range cols {
			k[i] = sortKeyText(fields[c], row[c])
		}
		o.keys[r] = strings.Join(k, ",")
	}
	return o
}

// sortKeyText is a value as its type's ordering sees it, so that values
// Postgres sorts as equal (ties it may put in any order) make one run:
// bpchar ignores trailing spaces; numeric ignores trailing zeros of the
// fraction (1.0 = 1.00). field is "name:oid:typmod"; v is as value
// writes it: NULL, or quoted.
func sortKeyText(field, v string) string {
	if v == "NULL" {
		return v
	}
	if u, err := strconv.Unquote(v); err == nil {
		v = u
	}
	oid := field[strings.LastIndexByte(field[:strings.LastIndexByte(field, ':')], ':')+1 : strings.LastIndexByte(field, ':')]
	switch oid {
	case "1042": // bpchar
		return strings.TrimRight(v, " ")
	case "1700": // numeric
		if strings.Contains(v, ".") && !strings.ContainsAny(v, "eE") {
			v = strings.TrimRight(strings.TrimRight(v, "0"), ".")
			if v == "-0" {
				v = "0"
			}
		}
	}
	return v
}

// unlimited is the reference's answer to sql without its top-level
// LIMIT and OFFSET, or nil.
func unlimited(ctx context.Context, ref *pgx.Conn, mode pgx.QueryExecMode, st statement) [][]string {
	tree, err := pg_query.Parse(st.sql)
	if err != nil {
		return nil
	}
	s := tree.Stmts[0].Stmt.GetSelectStmt()
	s.LimitCount, s.LimitOffset, s.LimitOption = nil, nil, pg_query.LimitOption_LIMIT_OPTION_DEFAULT
	all, err := pg_query.Deparse(tree)
	if err != nil {
		return nil
	}
	a := probe(ctx, ref, all, mode, st.args...)
	if a.code != "" {
		return nil
	}
	return a.rows
}

// mismatch compares the router's answer with the reference's: "" when
// they agree.
func mismatch(ref, got answer, o ordering) string {
	if ref.code != "" || got.code != "" {
		if ref.code != got.code {
			return fmt.Sprintf("error %s %q, want %s %q", got.code, got.msg, ref.code, ref.msg)
		}
		return ""
	}
	if !slices.Equal(ref.fields, got.fields) {
		return fmt.Sprintf("columns %v, want %v", got.fields, ref.fields)
	}
	if ref.tag != got.tag {
		return fmt.Sprintf("command tag %q, want %q", got.tag, ref.tag)
	}
	switch {
	case o.keys != nil:
		return compareRuns(ref.rows, got.rows, o)
	case o.limited || o.offset:
		// Any n rows (or the rows after any m) answer it: the tag
		// compared their number; they must be rows of the whole answer.
		if o.all != nil {
			return subMultiset(got.rows, o.all)
		}
		return ""
	case o.sorted:
		// The order could not be read: the rows are still the same.
		return compareMultisets(ref.rows, got.rows)
	}
	return compareMultisets(ref.rows, got.rows)
}

func render(rows [][]string) []string {
	out := make([]string, len(rows))
	for i, r := range rows {
		out[i] = strings.Join(r, ",")
	}
	return out
}

func compareMultisets(ref, got [][]string) string {
	a, b := render(ref), render(got)
	slices.Sort(a)
	slices.Sort(b)
	if !slices.Equal(a, b) {
		return fmt.Sprintf("rows (as multisets)\n  got  %v\n  want %v", b, a)
	}
	return ""
}

// compareRuns compares rows sorted by keys the reference's rows have
// (o.keys, by position): each run of equal keys must hold, at the same
// positions, the same multiset of rows, except that a run a LIMIT ends
// (or an OFFSET starts) may hold any of its ties.
func compareRuns(ref, got [][]string, o ordering) string {
	if len(ref) != len(got) {
		return fmt.Sprintf("%d rows, want %d", len(got), len(ref))
	}
	for start := 0; start < len(ref); {
		end := start + 1
		for end < len(ref) && o.keys[end] == o.keys[start] {
			end++
		}
		cut := o.limited && end == len(ref) || o.offset && start == 0
		if !cut {
			if d := compareMultisets(ref[start:end], got[start:end]); d != "" {
				return fmt.Sprintf("rows %d to %d (sort key %s): %s\n  got  %v\n  want %v", start, end-1, o.keys[start], d, render(got), render(ref))
			}
		}
		start = end
	}
	return ""
}

// subMultiset reports rows of got that all does not have (as many times).
func subMultiset(got, all [][]string) string {
	have := map[string]int{}
	for _, r := range render(all) {
		have[r]++
	}
	for _, r := range render(got) {
		if have[r] == 0 {
			return fmt.Sprintf("row %s is not in the answer without LIMIT and OFFSET", r)
		}
		have[r]--
	}
	return ""
}
