package router

import (
	"slices"
	"testing"

	"github.com/tesseradb/tessera/router/planner"
)

// mergeOrdered follows Postgres's NULL placement: last for ASC, first for
// DESC, unless NULLS FIRST or LAST says otherwise; ties keep shard order.
func TestMergeOrderedNulls(t *testing.T) {
	row := func(name string, v *int64) orderedRow { return orderedRow{msg: []byte(name), keys: []*int64{v}} }
	n := func(v int64) *int64 { return &v }
	shards := func(desc bool) [][]orderedRow {
		// Each shard's rows in the order Postgres sorts them.
		a := []orderedRow{row("a1", n(1)), row("a3", n(3)), row("aN", nil)}
		b := []orderedRow{row("b2", n(2)), row("b3", n(3)), row("bN", nil)}
		if desc {
			slices.Reverse(a)
			slices.Reverse(b)
		}
		return [][]orderedRow{a, b}
	}
	names := func(rows []orderedRow) []string {
		var out []string
		for _, r := range rows {
			out = append(out, string(r.msg))
		}
		return out
	}
	for _, c := range []struct {
		key   planner.OrderKey
		desc  bool // shards' own order puts NULLs first
		limit int64
		want  []string
	}{
		{planner.OrderKey{}, false, 10, []string{"a1", "b2", "a3", "b3", "aN", "bN"}},
		{planner.OrderKey{}, false, 3, []string{"a1", "b2", "a3"}},
		{planner.OrderKey{Desc: true, NullsFirst: true}, true, 10, []string{"aN", "bN", "a3", "b3", "b2", "a1"}},
	} {
		if got := names(mergeOrdered(shards(c.desc), []planner.OrderKey{c.key}, c.limit)); !slices.Equal(got, c.want) {
			t.Errorf("%+v limit %d: %v, want %v", c.key, c.limit, got, c.want)
		}
	}
	// ASC NULLS FIRST: each shard sends its NULLs first.
	a := []orderedRow{row("aN", nil), row("a1", n(1))}
	b := []orderedRow{row("bN", nil), row("b0", n(0))}
	if got := names(mergeOrdered([][]orderedRow{a, b}, []planner.OrderKey{{NullsFirst: true}}, 10)); !slices.Equal(got, []string{"aN", "bN", "b0", "a1"}) {
		t.Errorf("NULLS FIRST: %v", got)
	}
}
