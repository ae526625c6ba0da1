package fidelity_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestQueryGen writes random SELECTs over the differential data set
// (querygen_sql_test.go) and runs each on the plain database and through
// the router, in the simple and the extended protocol, compared as
// TestDifferential compares (issue #16, "The proof"). A wrong answer is
// shrunk (clauses dropped, expressions simplified while the answers still
// differ) and reported with the seed, the statement's number, the
// smallest statement, the expected and the got answer; it fails the test.
//
// It runs for TESSERA_QUERYGEN_DURATION (default 20s, as in `make test`;
// 30m on demand, with -timeout raised to match) from
// TESSERA_QUERYGEN_SEED (default: the clock), printed so that a run can be
// repeated: statement n of a seed is always the same, and
// TESSERA_QUERYGEN_FIRST=n starts there.
func TestQueryGen(t *testing.T) {
	duration := 20 * time.Second
	if s := os.Getenv("TESSERA_QUERYGEN_DURATION"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil {
			t.Fatalf("TESSERA_QUERYGEN_DURATION: %v", err)
		}
		duration = d
	}
	seed := uint64(time.Now().UnixNano())
	if s := os.Getenv("TESSERA_QUERYGEN_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("TESSERA_QUERYGEN_SEED: %v", err)
		}
		seed = v
	}
	// TESSERA_QUERYGEN_FIRST starts at a reported statement's number.
	first, _ := strconv.ParseUint(os.Getenv("TESSERA_QUERYGEN_FIRST"), 10, 64)
	t.Logf("TESSERA_QUERYGEN_SEED=%d TESSERA_QUERYGEN_DURATION=%v TESSERA_QUERYGEN_FIRST=%d", seed, duration, first)
	ctx, cancel := context.WithTimeout(context.Background(), duration+10*time.Minute)
	defer cancel()
	tessera, ref := diffDatabases(t, ctx)

	modes := []struct {
		name string
		mode pgx.QueryExecMode
	}{{"simple", pgx.QueryExecModeSimpleProtocol}, {"extended", pgx.QueryExecModeCacheStatement}}
	var run, answered, wrong, refErrors int
	refusals := map[string]int{}
	var invalid []string
	deadline := time.Now().Add(duration)
	for n := first; time.Now().Before(deadline); n++ {
		q := generate(seed, n)
		sql, args := q.render()
		run++
		for _, m := range modes {
			want := ask(ctx, ref, sql, m.mode, args...)
			got := ask(ctx, tessera, sql, m.mode, args...)
			if want.code == "client" || got.code == "client" {
				t.Fatalf("statement %d of seed %d (%s protocol): %s %v: the connection failed: reference %s, router %s",
					n, seed, m.name, sql, args, want.msg, got.msg)
			}
			if m.mode == pgx.QueryExecModeSimpleProtocol && want.code != "" {
				refErrors++
				if len(invalid) < 5 {
					invalid = append(invalid, fmt.Sprintf("%s %v: %s %s", sql, args, want.code, want.msg))
				}
			}
			if got.code == "0A000" && want.code != "0A000" {
				if m.mode == pgx.QueryExecModeSimpleProtocol {
					refusals[reason(got.msg)]++
				}
				continue
			}
			st := statement{sql: sql, args: args}
			if d := mismatch(want, got, orderOf(ctx, ref, m.mode, st, want)); d != "" {
				wrong++
				small := shrink(q, stillWrong(ctx, tessera, ref, m.mode, want.code != ""))
				ssql, sargs := small.render()
				sst := statement{sql: ssql, args: sargs}
				swant, sgot := ask(ctx, ref, ssql, m.mode, sargs...), ask(ctx, tessera, ssql, m.mode, sargs...)
				t.Errorf("WRONG ANSWER: TESSERA_QUERYGEN_FIRST=%d TESSERA_QUERYGEN_SEED=%d (%s protocol)\n  %s\n  %s\nshrunk to\n  %s\n  %s\n  expected %s\n  got      %s",
					n, seed, m.name, st, d, sst, mismatch(swant, sgot, orderOf(ctx, ref, m.mode, sst, swant)), show(swant), show(sgot))
				break
			}
			if m.mode == pgx.QueryExecModeSimpleProtocol {
				answered++
			}
		}
	}
	refused := 0
	reasons := make([]string, 0, len(refusals))
	for r, c := range refusals {
		reasons = append(reasons, r)
		refused += c
	}
	slices.SortFunc(reasons, func(a, b string) int { return refusals[b] - refusals[a] })
	var report strings.Builder
	fmt.Fprintf(&report, "seed %d, %v: %d statements (each in both protocols): %d answered as Postgres does, %d refused with 0A000, %d wrong; %d are errors on Postgres too\n",
		seed, duration, run, answered, refused, wrong, refErrors)
	for _, r := range reasons {
		fmt.Fprintf(&report, "%6d  %s\n", refusals[r], r)
	}
	t.Log(report.String())
	// The generator must write statements Postgres answers: a generator
	// of errors would prove nothing.
	if run < 20 || refErrors*10 > run {
		t.Errorf("%d of %d generated statements are errors on Postgres itself: %s", refErrors, run, strings.Join(invalid, "\n"))
	}
	if answered == 0 {
		t.Errorf("none of %d generated statements was answered", run)
	}
}

// generate is statement n of seed: the same whatever ran before it.
func generate(seed, n uint64) *genQuery {
	var args []any
	g := &generator{r: rand.New(rand.NewPCG(seed, n)), args: &args}
	q := g.query()
	q.args = args
	return q
}

// show writes an answer briefly: its error, or its columns and first rows.
func show(a answer) string {
	if a.code != "" {
		return a.code + " " + a.msg
	}
	rows := render(a.rows)
	if len(rows) > 20 {
		rows = append(rows[:20], fmt.Sprintf("… %d rows", len(a.rows)))
	}
	return fmt.Sprintf("%v %s %v", a.fields, a.tag, rows)
}

// stillWrong says whether the router answers a statement wrongly (not
// refused; the reference answering unless it failed at first too).
func stillWrong(ctx context.Context, tessera, ref *pgx.Conn, mode pgx.QueryExecMode, refError bool) func(*genQuery) bool {
	return func(c *genQuery) bool {
		sql, args := c.render()
		want := ask(ctx, ref, sql, mode, args...)
		got := ask(ctx, tessera, sql, mode, args...)
		if want.code != "" && !refError || got.code == "0A000" && want.code != "0A000" {
			return false
		}
		return mismatch(want, got, orderOf(ctx, ref, mode, statement{sql: sql, args: args}, want)) != ""
	}
}

// shrink makes q smaller while wrongAnswer holds, one candidate at a
// time, for at most 300 tries.
func shrink(q *genQuery, wrongAnswer func(*genQuery) bool) *genQuery {
	for tries := 0; tries < 300; {
		smaller := false
		for _, c := range candidates(q) {
			tries++
			if wrongAnswer(c) {
				q, smaller = c, true
				break
			}
		}
		if !smaller {
			break
		}
	}
	return q
}

// candidates are q with one clause dropped or one expression simplified,
// the biggest cuts first.
func candidates(q *genQuery) []*genQuery {
	var out []*genQuery
	edit := func(f func(c *genQuery)) {
		c := *q
		c.sel, c.joins, c.where = slices.Clone(q.sel), slices.Clone(q.joins), slices.Clone(q.where)
		c.group, c.having, c.order = slices.Clone(q.group), slices.Clone(q.having), slices.Clone(q.order)
		f(&c)
		out = append(out, &c)
	}
	if q.other != nil {
		edit(func(c *genQuery) { c.other, c.setop = nil, "" })
		o := *q.other
		o.order, o.limit, o.offset, o.args = q.order, q.limit, q.offset, q.args
		out = append(out, &o)
		for _, oc := range candidates(q.other) {
			edit(func(c *genQuery) { c.other = oc })
		}
	}
	for i := range q.joins {
		edit(func(c *genQuery) { c.joins = slices.Delete(c.joins, i, i+1) })
	}
	for i := range q.where {
		edit(func(c *genQuery) { c.where = slices.Delete(c.where, i, i+1) })
	}
	if q.limit != "" {
		edit(func(c *genQuery) { c.limit = "" })
	}
	if q.offset != "" {
		edit(func(c *genQuery) { c.offset = "" })
	}
	for i := range q.order {
		edit(func(c *genQuery) { c.order = slices.Delete(c.order, i, i+1) })
	}
	for i := range q.having {
		edit(func(c *genQuery) { c.having = slices.Delete(c.having, i, i+1) })
	}
	if q.distinct {
		edit(func(c *genQuery) { c.distinct = false })
	}
	for i := range q.group {
		edit(func(c *genQuery) { c.group = slices.Delete(c.group, i, i+1) })
	}
	if len(q.sel) > 1 {
		for i := range q.sel {
			edit(func(c *genQuery) { c.sel = slices.Delete(c.sel, i, i+1) })
		}
	}
	simplify := func(list []genExpr, set func(c *genQuery) []genExpr) {
		for i, e := range list {
			for _, s := range e.simpler {
				edit(func(c *genQuery) { set(c)[i] = s })
			}
		}
	}
	simplify(q.where, func(c *genQuery) []genExpr { return c.where })
	simplify(q.sel, func(c *genQuery) []genExpr { return c.sel })
	simplify(q.group, func(c *genQuery) []genExpr { return c.group })
	simplify(q.having, func(c *genQuery) []genExpr { return c.having })
	for i, j := range q.joins {
		for _, s := range j.on.simpler {
			edit(func(c *genQuery) { c.joins[i].on = s })
		}
		if j.kind != "JOIN" {
			edit(func(c *genQuery) { c.joins[i].kind = "JOIN" })
		}
	}
	return out
}

// TestShrink checks the shrinker without a cluster: a "wrong answer"
// that any statement with a DISTINCT, a join or a WHERE clause shows
// shrinks to a statement with only that part left.
func TestShrink(t *testing.T) {
	for n := uint64(0); n < 200; n++ {
		q := generate(7, n)
		for _, part := range []string{" DISTINCT ", " JOIN ", " WHERE "} {
			sql, _ := q.render()
			if !strings.Contains(sql, part) {
				continue
			}
			small := shrink(q, func(c *genQuery) bool {
				s, _ := c.render()
				return strings.Contains(s, part)
			})
			s, _ := small.render()
			if !strings.Contains(s, part) {
				t.Fatalf("%s shrank to %s, which lost %q", sql, s, part)
			}
			parts := len(small.joins) + len(small.where) + len(small.order) + len(small.having) + len(small.sel)
			if small.distinct {
				parts++
			}
			if small.other != nil || parts > 2 || small.limit != "" || small.offset != "" {
				t.Errorf("%s shrank only to %s", sql, s)
			}
		}
	}
}

// TestQueryGenFindsAPlantedDifference checks that the generator, the
// comparator and the shrinker find a wrong answer with real data: on the
// reference only, one item's qty changes (put back at the end); within a fixed seed's first 2,000 statements one must
// differ, and it must shrink to a statement reading qty without joins or
// filters.
func TestQueryGenFindsAPlantedDifference(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	tessera, ref := diffDatabases(t, ctx)
	var qty int
	if err := ref.QueryRow(ctx, "SELECT qty FROM items WHERE k = 5").Scan(&qty); err != nil {
		t.Fatal(err)
	}
	mustExec(t, ref, fmt.Sprintf("UPDATE items SET qty = %d WHERE k = 5", qty+1))
	defer mustExec(t, ref, fmt.Sprintf("UPDATE items SET qty = %d WHERE k = 5", qty))
	mode := pgx.QueryExecModeSimpleProtocol
	for n := uint64(0); n < 2000; n++ {
		q := generate(5, n)
		sql, args := q.render()
		want, got := ask(ctx, ref, sql, mode, args...), ask(ctx, tessera, sql, mode, args...)
		if want.code != "" || got.code != "" {
			continue
		}
		if mismatch(want, got, orderOf(ctx, ref, mode, statement{sql: sql, args: args}, want)) == "" {
			continue
		}
		small := shrink(q, stillWrong(ctx, tessera, ref, mode, false))
		s, _ := small.render()
		if !strings.Contains(s, "qty") || len(small.joins)+len(small.where) > 0 || small.other != nil {
			t.Fatalf("statement %d, %s, shrank only to %s", n, sql, s)
		}
		t.Logf("statement %d, %s, shrank to %s", n, sql, s)
		return
	}
	t.Fatal("no difference found in 2,000 statements: the generator or the comparator misses a changed row")
}
